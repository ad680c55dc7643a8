"""MCP tools under the policy: ``("exec", "mcp:SERVER/TOOL")`` is a name, matched whole."""

from __future__ import annotations

from harnessnb import Policy


def test_an_mcp_target_is_matched_as_a_whole_name() -> None:
    policy = Policy.default().allow_exec("mcp:git/*").deny_exec("mcp:*/git_reset")
    assert policy.explain("exec", "mcp:git/git_status").allowed
    reset = policy.explain("exec", "mcp:git/git_reset")
    assert reset.denied
    assert reset.rule == "deny exec mcp:*/git_reset"
    assert reset.target == "mcp:git/git_reset"
    # Another server's tool: the default, not the git rule.
    other = policy.explain("exec", "mcp:time/get_current_time")
    assert (other.effect, other.rule) == ("ask", None)


def test_a_command_rule_never_matches_an_mcp_tool_by_its_last_part() -> None:
    # As a command line, "mcp:git/git_reset" would be the program whose basename is
    # git_reset: a rule for the command git_reset must not reach the tool.
    policy = Policy.default().allow_exec("git_reset").deny_exec("git_status")
    assert policy.explain("exec", "mcp:git/git_reset").effect == "ask"
    assert policy.explain("exec", "mcp:git/git_status").effect == "ask"
    # Nor is an MCP tool name read as a command with wrappers or inline code.
    assert policy.explain("exec", "mcp:sh/sh -c").rule is None


def test_mcp_rules_do_not_limit_commands() -> None:
    # An interpreter's inline code asks under a default allow only while a rule limits
    # commands; a rule about MCP tools (like one about user tools) does not.
    permissive = Policy.permissive()
    assert permissive.explain("exec", "python -c 'print(1)'").allowed
    assert permissive.deny_exec("mcp:*/git_reset").explain("exec", "python -c 'x'").allowed
    assert permissive.deny_exec("rm").explain("exec", "python -c 'x'").effect == "ask"


def test_at_least_as_strict_keeps_mcp_rules() -> None:
    started = Policy.default().deny_exec("mcp:*/git_reset").ask_exec("mcp:git/*")
    assert started.at_least_as_strict_as(started)
    assert not Policy.default().at_least_as_strict_as(started)
    assert not started.allow_exec("mcp:time/*").at_least_as_strict_as(started)
    assert (
        Policy.default()
        .deny_exec("mcp:*/git_reset")
        .ask_exec("mcp:git/*")
        .deny_exec("mcp:*")
        .at_least_as_strict_as(started)
    )
