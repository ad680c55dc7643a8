"""The permission policy: layered rules, verdict attribution, merge, persistence."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb import Policy, Verdict
from harnessnb.rules._policy import exec_target
from tests.files_helpers import SECRET_KINDS

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


# One file (or more) per pattern of the secrets table, named as the root would hold it.
SECRET_FILES = [
    *SECRET_KINDS,
    "service-account.json",
    "service-account-prod.json",
    ".ssh/id_ed25519_sk",
    ".ssh/known_hosts",
    ".ssh/config",
    ".ssh/backup.db",
    ".ssh/hub",
    ".ssh/keypub",
    ".ssh/b",
    ".ssh/ub",
    ".ssh/pub",
    ".ssh/keys/id_rsa.pub",  # a folder under .ssh/ is covered whole
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ecdsa_sk",
    "id_ed25519_sk",
    "cert.p12",
    "cert.pfx",
]
SECRETS = [
    *SECRET_FILES,
    *(f"config/{path}" for path in SECRET_FILES),
    *(f"a/b/c/{path}" for path in SECRET_FILES),
    *(path.upper() for path in SECRET_FILES),
    *(f"Deep/{path.title()}" for path in SECRET_FILES),
]


@pytest.mark.parametrize("path", SECRETS)
@pytest.mark.parametrize("act", ["read", "write"])
def test_secrets_are_denied_in_any_directory_in_any_case(act: str, path: str) -> None:
    verdict = Policy.default().explain(act, path)
    assert verdict.effect == "deny"
    assert verdict.layer == "secrets"


@pytest.mark.parametrize("pattern", Policy.SECRET_PATTERNS)
def test_every_secret_pattern_has_a_file_in_the_table(pattern: str) -> None:
    rule = hn.Policy().deny_read(pattern).rules()[0][1]
    assert any(rule.matches(path) for path in SECRET_FILES)


def test_the_secrets_layer_is_the_table_for_read_and_write() -> None:
    (layer,) = Policy.default().layers
    assert layer.name == "secrets"
    assert [(r.act, r.effect, r.pattern) for r in layer.rules] == [
        (act, "deny", pattern) for act in ("read", "write") for pattern in Policy.SECRET_PATTERNS
    ]
    assert Policy.permissive().layers == Policy.default().layers


@pytest.mark.parametrize("path", [".ENV", "Server.PEM", "./.env"])
def test_secret_denies_ignore_case_and_dot_slash(path: str) -> None:
    assert Policy.default().explain("read", path).denied


LOOKALIKES = [
    "environment.md",
    "env.py",
    ".environment",
    "key.txt",
    "keys/notes.md",
    "id_rsa.pub",
    ".ssh/id_rsa.pub",
    "home/.ssh/id_ed25519.PUB",
    ".ssh",
    "aws/credentials.md",
    ".aws/notes.txt",
    "credentials.yaml",
    "service.json",
    "my.envy",
    ".npmrc.md",
    "docker/config.json",
    ".kube/cache/x",
    "src/app.py",
]


@pytest.mark.parametrize("path", LOOKALIKES)
def test_lookalikes_of_secrets_are_not_denied(path: str) -> None:
    assert Policy.default().explain("read", path).allowed


FOLDER_RULES = [
    # (rule pattern, path, denied?)
    ("private", "private", True),
    ("private", "private/key.txt", True),
    ("private", "a/private/x", True),
    ("private", "a/b/private/c/d.txt", True),
    ("private", "PRIVATE/key.txt", True),
    ("private", "privateer/x", False),
    ("private", "not-private/x", False),
    ("private", "x/private.txt", False),
    ("a/private", "a/private/x", True),
    ("a/private", "z/a/private/x", True),
    ("a/private", "private/x", False),
    ("build/*", "build/out/x.o", True),
    ("build/*", "build", False),
    ("*.log", "logs/app.log", True),
    ("*.log", "old.log/inside.txt", True),
    ("*.log", "app.logs", False),
    ("data?", "data1/rows.csv", True),
    ("data?", "data/rows.csv", False),
]


@pytest.mark.parametrize(("pattern", "path", "denied"), FOLDER_RULES)
@pytest.mark.parametrize("effect", ["deny", "ask"])
def test_deny_and_ask_rules_on_a_folder_cover_everything_beneath(
    effect: str, pattern: str, path: str, denied: bool
) -> None:
    policy = Policy().rule("read", effect, pattern)
    assert (policy.explain("read", path).effect == effect) is denied


ALLOW_RULES = [
    # (allow pattern, path, allowed?): allows read narrowly, as written
    ("src/*", "src/a.py", True),
    ("src/*", "src/deep/a.py", True),  # ``*`` spans ``/``
    ("src", "src/a.py", False),
    ("*.md", "docs/index.md", True),
    ("*.md", "x.md/run.sh", False),
    ("NOTES.md", "notes.md", False),
    ("NOTES.md", "docs/NOTES.md", True),  # the basename
]


@pytest.mark.parametrize(("pattern", "path", "allowed"), ALLOW_RULES)
def test_allow_rules_name_what_they_allow(pattern: str, path: str, allowed: bool) -> None:
    assert Policy().allow_write(pattern).explain("write", path).allowed is allowed


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


def test_the_policy_a_provider_derives_is_made_once_per_hosts_and_judges_only_them() -> None:
    """Every run of a provider derives the same policy from the same one (immutable):
    made once per (policy, hosts), so its verdicts are kept from run to run; other
    hosts (the cache's key) derive another, which allows those and only those. The
    default policy is one value for the process, every layer and default as before."""
    base = Policy.default()
    assert base is Policy.default()
    assert [layer.name for layer in base.layers] == ["secrets"]
    assert base.defaults == {"read": "allow", "write": "ask", "exec": "ask", "net": "deny"}
    a = base.with_provider_hosts(["a.example"])
    assert base.with_provider_hosts(["a.example"]) is a
    assert base.with_provider_hosts(iter(["a.example"])) is a  # hosts as any iterable
    b = base.with_provider_hosts(["b.example"])
    assert b is not a
    assert a.explain("net", "a.example").effect == "allow"
    assert a.explain("net", "b.example").denied
    assert b.explain("net", "b.example").effect == "allow"
    assert b.explain("net", "a.example").denied
    both = base.with_provider_hosts(["a.example", "b.example"])
    assert both not in (a, b) and not both.explain("net", "b.example").denied
    # A policy built apart (another value) derives its own: a caller's deny still wins.
    strict = base.layer("app").deny_net("a.example").with_provider_hosts(["a.example"])
    assert strict is not a and strict.explain("net", "a.example").denied
    assert base.with_provider_hosts([]) is base


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


def test_a_stored_secrets_layer_gains_the_patterns_added_since() -> None:
    stored = Policy.default().to_dict()
    stored["layers"][0] = {"name": "secrets", "rules": [
        {"act": act, "effect": "deny", "pattern": pattern}
        for act in ("read", "write")
        for pattern in (".env", "*.pem", "*.key", "id_rsa", "id_ed25519")  # the old table
    ]}  # fmt: skip
    loaded = Policy.from_dict(stored)
    assert set(loaded.rules()) == set(Policy.default().rules())
    assert loaded.explain("read", ".aws/credentials").denied


@pytest.mark.parametrize(
    ("policy", "by_name"),
    [(Policy.default(), True),
     (Policy.permissive(), True),
     (Policy.default().layer("app").allow_write("NOTES.md").deny_read("private"), True),
     (Policy.default().layer("secrets").allow_read("docs/*"), False),
     (Policy.default().layer("secrets").deny_read("vault"), False),
     (Policy.permissive(secrets=False), False)],
    ids=["default", "permissive", "app-layer", "secrets-allow", "secrets-deny", "no-secrets"],
)  # fmt: skip
def test_a_run_stores_the_built_in_secrets_layer_by_name_and_reads_the_policy_back(
    tmp_path: Path, policy: Policy, by_name: bool
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with hn.Store(tmp_path / "runs.duckdb") as store:
        done = hn.run_sync(hn.TaskContract("t", ws), hn.ScriptedProvider(["done"]),
                           store=store, policy=policy)  # fmt: skip
        text = store.sql("select policy from run_rows")["policy"].iloc[0]
        row = store.get_run(done.run_id)
    assert row is not None and Policy.from_dict(row["policy"]) == policy
    layers = {layer["name"]: layer for layer in json.loads(text)["layers"]}
    if by_name:
        assert layers["secrets"] == {"name": "secrets", "builtin": 1}
        assert len(text) < 600  # was 4.1 KB
    elif "secrets" in layers:  # a changed secrets layer is stored whole
        assert len(layers["secrets"]["rules"]) == 2 * len(Policy.SECRET_PATTERNS) + 1


@pytest.mark.parametrize(
    "data",
    [{}, {"layers": [{"name": "x"}], "defaults": {}},
     {"layers": [{"name": "app", "builtin": 1}], "defaults": {}},
     {"layers": [{"name": "secrets", "builtin": "1"}], "defaults": {}},
     {"layers": [{"name": "secrets", "builtin": 99}], "defaults": {}}],
)  # fmt: skip
def test_from_dict_rejects_garbage(data: dict[str, object]) -> None:
    with pytest.raises(hn.ConfigError):
        Policy.from_dict(data)


def test_repr_is_short_and_str_is_a_table() -> None:
    policy = Policy.default().layer("app").allow_write("NOTES.md")
    assert repr(policy) == (
        f"Policy(layers=[secrets,app], rules={2 * len(Policy.SECRET_PATTERNS) + 1}, "
        "read=allow write=ask exec=ask net=deny)"
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


# ---------------------------------------------------------------- exec: what will run

DENY_RM = Policy.permissive().layer("app").deny_exec("rm")
WRAPPED_RM = [
    ["rm", "-rf", "x"],
    ["/bin/rm", "-rf", "x"],
    ["env", "rm", "-rf", "x"],
    ["env", "-i", "FOO=1", "BAR=2", "rm", "x"],
    ["env", "-u", "HOME", "--unset=PATH", "-C", "/tmp", "rm", "x"],
    ["env", "--", "rm", "x"],
    ["/usr/bin/env", "rm", "x"],
    ["nice", "rm", "x"],
    ["nice", "-n", "5", "rm", "x"],
    ["nice", "-n5", "rm", "x"],
    ["nice", "-10", "rm", "x"],
    ["nice", "--adjustment=3", "rm", "x"],
    ["nohup", "rm", "x"],
    ["timeout", "10", "rm", "x"],
    ["timeout", "-s", "KILL", "-k", "5", "1.5m", "rm", "x"],
    ["timeout", "--preserve-status", "--signal=TERM", "10", "rm", "x"],
    ["stdbuf", "-oL", "rm", "x"],
    ["stdbuf", "-o", "0", "--error=L", "rm", "x"],
    ["xargs", "rm"],
    ["xargs", "-0", "-n", "1", "-P4", "rm"],
    ["xargs", "--null", "--max-args=1", "rm", "-f"],
    ["sudo", "rm", "x"],
    ["sudo", "-u", "root", "-E", "-n", "rm", "x"],
    ["sudo", "--user=root", "HOME=/", "rm", "x"],
    ["setsid", "-w", "rm", "x"],
    ["time", "-f", "%e", "rm", "x"],
    ["busybox", "rm", "x"],
    ["toybox", "rm", "x"],
    ["find", ".", "-name", "*.py", "-exec", "rm", "{}", ";"],
    ["find", ".", "-execdir", "env", "rm", "{}", "+"],
    # nested
    ["sudo", "-u", "me", "env", "FOO=1", "nice", "-n", "5", "timeout", "9", "rm", "x"],
    ["nohup", "stdbuf", "-oL", "xargs", "busybox", "rm"],
    ["busybox", "env", "busybox", "nice", "rm"],
    # a wrapper option this reader does not know: every later word is tried
    ["env", "--unknown-flag", "rm", "x"],
    ["nice", "-z", "7", "rm", "x"],
    ["env", "-S", "rm -rf x"],
]


@pytest.mark.parametrize("argv", WRAPPED_RM, ids=" ".join)
def test_a_deny_on_a_program_holds_behind_wrappers(argv: list[str]) -> None:
    target = exec_target(argv)
    verdict = DENY_RM.explain("exec", target)
    if argv[:2] == ["env", "-S"]:  # the command is inside a string: asks, never allows
        assert verdict.effect == "ask"
        return
    assert verdict == Verdict("deny", "exec", target, "deny exec rm", "app")


@pytest.mark.parametrize(
    "argv",
    [["env", "ls"], ["nice", "-n", "5", "rmdir", "x"], ["timeout", "10", "ls"], ["busybox", "ls"]],
    ids=" ".join,
)
def test_other_programs_behind_wrappers_keep_the_default(argv: list[str]) -> None:
    assert DENY_RM.explain("exec", exec_target(argv)).allowed


def test_a_deny_on_a_wrapper_holds_whatever_it_wraps() -> None:
    policy = Policy.permissive().deny_exec("sudo")
    assert policy.explain("exec", "sudo ls").denied
    assert policy.explain("exec", "env sudo -u x ls").denied


D = Policy.default()
EXEC_CASES = [
    # (policy, argv, effect)
    (D.allow_exec("pytest*"), ["pytest", "-q"], "allow"),
    # the wrapper runs too: allowed only when it is allowed as well
    (D.allow_exec("pytest*"), ["timeout", "10", "pytest", "-q"], "ask"),
    (D.allow_exec("pytest*").allow_exec("timeout"), ["timeout", "10", "pytest"], "allow"),
    (D.allow_exec("env"), ["env", "PATH=.", "pytest"], "ask"),
    (D.allow_exec("env").allow_exec("pytest"), ["env", "PATH=.", "pytest"], "allow"),
    (D.allow_exec("ls").ask_exec("rm"), ["env", "rm", "x"], "ask"),
    (D.allow_exec("ls"), ["busybox", "ls"], "ask"),
    (D.allow_exec("ls").allow_exec("busybox"), ["busybox", "ls"], "allow"),
    (D.allow_exec("find"), ["find", ".", "-exec", "rm", "{}", ";"], "ask"),
    (D.allow_exec("find"), ["find", ".", "-name", "x"], "allow"),
]


@pytest.mark.parametrize(("policy", "argv", "effect"), EXEC_CASES)
def test_every_program_a_command_starts_is_judged(
    policy: Policy, argv: list[str], effect: str
) -> None:
    assert policy.explain("exec", exec_target(argv)).effect == effect


INLINE = [
    ["sh", "-c", "rm -rf x"],
    ["bash", "-c", "rm -rf x"],
    ["bash", "-ec", "rm -rf x"],
    ["bash", "-o", "pipefail", "-c", "rm"],
    ["/bin/dash", "-c", "rm"],
    ["zsh", "-c", "rm"],
    ["python", "-c", "import os"],
    ["python3", "-c", "import os"],
    ["python3.12", "-I", "-c", "import os"],
    ["python3", "-Ic", "import os"],
    ["/usr/bin/python3", "-W", "ignore", "-c", "import os"],
    ["pypy3", "-c", "import os"],
    ["node", "-e", "require('fs')"],
    ["node", "--eval", "x"],
    ["node", "--eval=x"],
    ["node", "-p", "x"],
    ["node", "--require", "m", "-e", "x"],
    ["deno", "eval", "x"],
    ["bun", "-e", "x"],
    ["perl", "-e", "unlink 'x'"],
    ["perl", "-ne", "print"],
    ["perl", "-E", "say 1"],
    ["ruby", "-e", "x"],
    ["php", "-r", "x"],
    ["lua", "-e", "x"],
    ["Rscript", "-e", "x"],
    ["awk", "BEGIN { system(\"rm x\") }"],
    ["gawk", "-F", ":", "{print}"],
    ["pwsh", "-NoProfile", "-Command", "x"],
    ["powershell.exe", "-EncodedCommand", "eAA="],
    ["osascript", "-e", "x"],
    ["busybox", "sh", "-c", "rm"],
    ["env", "FOO=1", "python3", "-c", "x"],
    ["nice", "bash", "-c", "rm"],
]
NOT_INLINE = [
    ["python3", "script.py", "-c", "x"],
    ["python3", "-m", "pytest", "-c", "setup.cfg"],
    ["python3", "-W", "error::DeprecationWarning", "x.py"],
    ["bash", "script.sh", "-c"],
    ["bash", "--norc", "script.sh"],
    ["node", "app.js", "-e"],
    ["perl", "-MData::Dumper", "x.pl"],
    ["ruby", "-E", "utf-8", "x.rb"],
    ["awk", "-f", "prog.awk", "data"],
]


def _interpreter(argv: list[str]) -> str:
    return next(a for a in argv if a not in ("env", "FOO=1", "nice", "busybox"))


@pytest.mark.parametrize("argv", INLINE, ids=" ".join)
def test_inline_code_asks_unless_the_interpreter_is_allowed_by_name(argv: list[str]) -> None:
    target = exec_target(argv)
    wrappers = [w for w in ("env", "nice", "busybox") if w in argv]
    by_pattern = Policy.default().allow_exec("*")
    assert by_pattern.explain("exec", target).effect == "ask"
    assert by_pattern.explain("exec", target).layer == "built-in"
    assert Policy.default().allow_exec(f"{argv[0]}*").explain("exec", target).effect == "ask"
    # a blocklist cannot see into inline code, so an allow default asks beside one
    assert DENY_RM.explain("exec", target).effect == "ask"
    named = Policy.default().allow_exec(_interpreter(argv))
    for wrapper in wrappers:
        named = named.allow_exec(wrapper)
    assert named.explain("exec", target).allowed
    # the exact command line, allowed as a literal (what --verify does), is allowed
    literal = "".join(f"[{c}]" if c in "*?[" else c for c in target)
    assert Policy.default().allow_exec(literal).explain("exec", target).allowed
    # a deny on the interpreter still wins, and the plain permissive policy allows
    assert named.deny_exec(_interpreter(argv)).explain("exec", target).denied
    assert Policy.permissive().explain("exec", target).allowed


@pytest.mark.parametrize("argv", NOT_INLINE, ids=" ".join)
def test_running_a_file_is_judged_by_the_patterns(argv: list[str]) -> None:
    target = exec_target(argv)
    assert Policy.default().allow_exec("*").explain("exec", target).allowed
    assert DENY_RM.explain("exec", target).allowed


def test_a_wrapper_option_not_understood_asks_beside_a_blocklist() -> None:
    target = "env --frobnicate ls"
    assert DENY_RM.explain("exec", target).effect == "ask"
    assert Policy.permissive().explain("exec", target).allowed
    assert Policy.default().allow_exec("env").allow_exec("ls").explain("exec", target).effect == (
        "ask"
    )


def test_tool_targets_and_unparsable_lines_are_judged_whole() -> None:
    policy = Policy.default().allow_exec("tool:publish").deny_exec("rm")
    assert policy.explain("exec", "tool:publish").allowed
    assert policy.explain("exec", "rm 'unterminated").denied
