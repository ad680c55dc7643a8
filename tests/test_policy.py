"""The permission policy: layered rules, verdict attribution, merge, persistence."""

from __future__ import annotations

import itertools

import pytest

import harnessnb as hn
from harnessnb import Policy, Verdict
from harnessnb.rules._policy import exec_target

# ---------------------------------------------------------------- evaluation table

LAYERED = (
    Policy()
    .layer("base")
    .allow_write("src/*")
    .ask_write("src/config/*")
    .layer("team")
    .deny_write("src/config/prod.yml")
    .allow_write("docs/*")
    .layer("me")
    .ask_write("docs/*")
    .allow_exec("pytest*")
    .deny_exec("rm")
)

CASES = [
    # (act, target, effect, rule, layer)
    ("write", "src/app.py", "allow", "allow write src/*", "base"),
    ("write", "src/config/dev.yml", "ask", "ask write src/config/*", "base"),
    # deny in a later layer beats an allow and an ask of an earlier one
    ("write", "src/config/prod.yml", "deny", "deny write src/config/prod.yml", "team"),
    # ask in a later layer beats an allow of an earlier one
    ("write", "docs/index.md", "ask", "ask write docs/*", "me"),
    # nothing matches: the default decides, no rule, no layer
    ("write", "README.md", "ask", None, None),
    ("read", "anything.txt", "allow", None, None),
    ("net", "example.com", "deny", None, None),
    ("exec", "pytest -q", "allow", "allow exec pytest*", "me"),
    # an exec pattern matches the program name too
    ("exec", "rm -rf build", "deny", "deny exec rm", "me"),
    ("exec", "make", "ask", None, None),
]


@pytest.mark.parametrize(("act", "target", "effect", "rule", "layer"), CASES)
def test_deny_beats_ask_beats_allow_across_layers(
    act: str, target: str, effect: str, rule: str | None, layer: str | None
) -> None:
    assert LAYERED.explain(act, target) == Verdict(effect, act, target, rule, layer)


def test_specificity_never_carves_out_a_deny() -> None:
    policy = Policy().layer("a").deny_write("*").layer("b").allow_write("exactly.txt")
    assert policy.explain("write", "exactly.txt").effect == "deny"


def test_first_matching_layer_names_the_verdict() -> None:
    policy = Policy().layer("one").allow_read("*.md").layer("two").allow_read("README.md")
    verdict = policy.explain("read", "README.md")
    assert (verdict.rule, verdict.layer) == ("allow read *.md", "one")


DEFAULTS = [("read", "allow"), ("write", "ask"), ("exec", "ask"), ("net", "deny")]


@pytest.mark.parametrize(("act", "effect"), DEFAULTS)
def test_default_policy_defaults(act: str, effect: str) -> None:
    verdict = Policy.default().explain(act, "plain-target")
    assert (verdict.effect, verdict.rule, verdict.layer) == (effect, None, None)


SECRETS = [".env", "config/.env", "certs/server.pem", "a/b/c.key", "id_rsa", "home/id_ed25519"]


@pytest.mark.parametrize("path", SECRETS)
@pytest.mark.parametrize("act", ["read", "write"])
def test_secrets_are_denied_in_any_directory(act: str, path: str) -> None:
    verdict = Policy.default().explain(act, path)
    assert verdict.effect == "deny"
    assert verdict.layer == "secrets"


@pytest.mark.parametrize("path", [".ENV", "Server.PEM", "./.env"])
def test_secret_denies_ignore_case_and_dot_slash(path: str) -> None:
    assert Policy.default().explain("read", path).denied


@pytest.mark.parametrize("path", ["environment.md", ".envrc", "key.txt", "id_rsa.pub"])
def test_lookalikes_of_secrets_are_not_denied(path: str) -> None:
    assert Policy.default().explain("read", path).allowed


def test_secrets_cannot_be_allowed_by_a_later_layer() -> None:
    policy = Policy.default().layer("app").allow_read(".env").allow_write("*")
    assert policy.explain("read", ".env").rule == "deny read .env"
    assert policy.explain("write", "x/.env").denied


def test_permissive_allows_everything_but_secrets() -> None:
    policy = Policy.permissive()
    for act, target in [("write", "a.py"), ("exec", "make"), ("net", "example.com")]:
        assert policy.explain(act, target).allowed
    assert policy.explain("read", ".env").denied
    assert Policy.permissive(secrets=False).explain("read", ".env").allowed


def test_rules_go_into_the_user_layer_when_none_was_chosen() -> None:
    policy = Policy.default().allow_write("NOTES.md")
    assert policy.explain("write", "NOTES.md").layer == "user"


def test_builder_returns_new_policies() -> None:
    base = Policy.default()
    base.layer("app").allow_write("*")
    assert base.explain("write", "a.txt").effect == "ask"


@pytest.mark.parametrize(
    ("act", "effect", "pattern"),
    [("fly", "allow", "*"), ("read", "maybe", "*"), ("read", "allow", "")],
)
def test_bad_rules_are_config_errors(act: str, effect: str, pattern: str) -> None:
    with pytest.raises(hn.ConfigError):
        Policy().rule(act, effect, pattern)


def test_unknown_act_in_explain_is_a_config_error() -> None:
    with pytest.raises(hn.ConfigError):
        Policy().explain("teleport", "x")


# ---------------------------------------------------------------- net and providers

NET_CASES = [
    ("api.openai.com", "allow", "provider"),
    ("api.openai.com:443", "allow", "provider"),
    ("API.OPENAI.COM", "allow", "provider"),
    ("openrouter.ai", "deny", "app"),  # explicit deny beats the provider layer
    ("evil.example", "deny", None),
    ("cdn.example.org", "allow", "app"),
]


@pytest.mark.parametrize(("host", "effect", "layer"), NET_CASES)
def test_provider_layer_and_explicit_deny_net(host: str, effect: str, layer: str | None) -> None:
    policy = (
        Policy.default()
        .layer("app")
        .deny_net("openrouter.ai")
        .allow_net("*.example.org")
        .with_provider_hosts(["api.openai.com", "openrouter.ai"])
    )
    verdict = policy.explain("net", host)
    assert (verdict.effect, verdict.layer) == (effect, layer)


def test_provider_layer_sits_beneath_the_callers_layers() -> None:
    policy = Policy.default().layer("app").with_provider_hosts(["h.example"])
    assert [layer.name for layer in policy.layers] == ["provider", "secrets", "app"]
    # the caller's current layer survives, so later rules still go to "app"
    assert policy.allow_write("x").explain("write", "x").layer == "app"


def test_provider_layer_is_replaced_not_stacked() -> None:
    policy = Policy.default().with_provider_hosts(["a.example"]).with_provider_hosts(["b.example"])
    assert [layer.name for layer in policy.layers].count("provider") == 1
    assert policy.explain("net", "a.example").denied


# ---------------------------------------------------------------- merge

TARGETS = {
    "read": [".env", "src/a.py", "docs/x.md", "secret/k.txt"],
    "write": ["src/a.py", "docs/x.md", "NOTES.md", "dist/out.bin", ".env"],
    "exec": ["pytest -q", "rm -rf /", "make"],
    "net": ["example.com", "api.openai.com"],
}
RANK = {"allow": 0, "ask": 1, "deny": 2}

BASE = Policy.default().layer("org").deny_write("dist/*").deny_read("secret/*").ask_exec("make")
OVERLAYS = [
    Policy.permissive(secrets=False)
    .layer("loose")
    .allow_write("*")
    .allow_read("*")
    .allow_exec("*"),
    Policy().layer("org").allow_write("dist/*").allow_net("*"),
    Policy().with_default("write", "deny").layer("tight").ask_write("NOTES.md"),
]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_merge_never_undoes_a_deny_or_an_ask(overlay: Policy) -> None:
    merged = BASE.merge(overlay)
    for act, targets in TARGETS.items():
        for target in targets:
            before = BASE.explain(act, target)
            after = merged.explain(act, target)
            if before.effect in ("deny", "ask") and before.rule is not None:
                assert RANK[after.effect] >= RANK[before.effect], (act, target)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_merge_defaults_are_the_stricter_of_both(overlay: Policy) -> None:
    merged = BASE.merge(overlay)
    for act in ("read", "write", "exec", "net"):
        expected = max(BASE.defaults[act], overlay.defaults[act], key=RANK.__getitem__)
        assert merged.defaults[act] == expected


def test_merge_may_widen_with_allow_rules() -> None:
    merged = Policy.default().merge(Policy().layer("app").allow_write("NOTES.md"))
    assert merged.explain("write", "NOTES.md").allowed
    assert merged.explain("write", "other.md").effect == "ask"


def test_merge_joins_layers_of_the_same_name() -> None:
    merged = BASE.merge(Policy().layer("org").allow_write("src/*"))
    assert [layer.name for layer in merged.layers] == ["secrets", "org"]
    assert merged.explain("write", "src/a.py").layer == "org"


# ---------------------------------------------------------------- comparison


def test_a_policy_is_as_strict_as_itself() -> None:
    assert BASE.at_least_as_strict_as(BASE)


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (BASE.layer("more").deny_exec("curl"), True),  # an extra deny only tightens
        (BASE.with_default("net", "deny").with_default("read", "ask"), True),
        (Policy.default(), False),  # drops the org denies
        (BASE.layer("more").allow_write("NOTES.md"), False),  # an allow the stored lacks
        (BASE.with_default("write", "allow"), False),  # a looser default
        (BASE.merge(Policy().layer("x").ask_exec("make")), True),
    ],
)
def test_at_least_as_strict_as(candidate: Policy, expected: bool) -> None:
    assert candidate.at_least_as_strict_as(BASE) is expected


def test_an_ask_rule_cannot_loosen_a_deny_default() -> None:
    stored = Policy().with_default("exec", "deny")
    assert not stored.ask_exec("make").at_least_as_strict_as(stored)


def test_strictness_check_is_sound_on_a_grid() -> None:
    """Whenever the check says yes, no target gets a looser verdict."""
    candidates = [BASE, Policy.default(), Policy.permissive(), *OVERLAYS, BASE.merge(OVERLAYS[2])]
    for mine, theirs in itertools.product(candidates, repeat=2):
        if not mine.at_least_as_strict_as(theirs):
            continue
        for act, targets in TARGETS.items():
            for target in targets:
                assert (
                    RANK[mine.explain(act, target).effect]
                    >= RANK[theirs.explain(act, target).effect]
                ), (mine, theirs, act, target)


# ---------------------------------------------------------------- persistence and display


def test_to_dict_round_trips() -> None:
    policy = BASE.layer("app").allow_write("NOTES.md").with_provider_hosts(["h.example"])
    again = Policy.from_dict(policy.to_dict())
    assert again == policy
    assert again.to_dict() == policy.to_dict()
    for act, targets in TARGETS.items():
        for target in targets:
            assert again.explain(act, target) == policy.explain(act, target)


@pytest.mark.parametrize("data", [{}, {"layers": [{"name": "x"}], "defaults": {}}])
def test_from_dict_rejects_garbage(data: dict[str, object]) -> None:
    with pytest.raises(hn.ConfigError):
        Policy.from_dict(data)


def test_repr_is_short_and_str_is_a_table() -> None:
    policy = Policy.default().layer("app").allow_write("NOTES.md")
    assert repr(policy) == (
        "Policy(layers=[secrets,app], rules=11, read=allow write=ask exec=ask net=deny)"
    )
    lines = str(policy).splitlines()
    assert lines[0].split() == ["layer", "act", "effect", "pattern"]
    assert "app        write  allow   NOTES.md" in lines
    assert lines[-1].split() == ["(default)", "net", "deny", "*"]


def test_verdict_reason_text() -> None:
    verdict = Policy.default().explain("write", ".env")
    assert str(verdict) == "deny write .env (rule 'deny write .env' in layer 'secrets')"
    assert Policy.default().explain("exec", "ls").reason() == "the default for exec"


def test_exec_target_quotes_arguments() -> None:
    assert exec_target(["python", "-c", "print(1)"]) == "python -c 'print(1)'"


def test_public_names() -> None:
    assert hn.Policy is Policy
    assert hn.Verdict is Verdict
