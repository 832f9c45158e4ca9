"""docs/deployment.md's operator path as data: the blocks marked `<!-- operator-path: NAME -->`, which
tests/integration/test_operator_path.py runs in order on network-namespace hosts, and every shell line of
the page it cannot run, with the reason. tests/unit/test_operator_doc.py keeps the two in step."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DEPLOYMENT = Path(__file__).resolve().parents[1] / "docs" / "deployment.md"
_MARK = re.compile(r"^<!-- operator-path: ([\w-]+) -->$")

# Every marked block, in the order the integration test runs it (it asserts it ran each one).
MARKS = ("build", "install-db", "install-router", "certs", "cluster-file", "cluster-file-mode", "mint", "copy-admin",
         "copy-router", "agent-file", "config-check", "config-check-output", "start-agent", "router-env", "start-router", "first-tenant",
         "add-host", "replace-host", "remove-host", "upgrade")

# Unmarked ```sh and ```python blocks (keyed by their first line's start): why the operator-path test does
# not run them.
NOT_RUN = {
    "slacker cluster up --nodes 3 --tls": "the single-machine cluster, not a deployment: tests/integration/test_tls.py",
    "from pathlib import Path": "the test makes its hosts' certificates with this same call (ensure_cluster_pki), "
                                "naming its own hosts and addresses",
    "openssl req -x509": "the same certificates made by openssl instead of the Python above, which the test uses",
    "etcd --name etcd-a": "the test starts its three etcd members with slacker.local_etcd on the namespace bridge "
                          "(TLS, the same timing flags); a hand-written etcd command line is etcd's, not Slacker's",
    "slacker credential etcd-auth": "etcd's own authentication is tests/integration/test_credentials.py's",
    "install -m 644 deploy/prometheus/slacker-rules.yml": "Prometheus and promtool: tests/integration/test_prometheus.py "
                                                          "and tests/unit/test_alert_rules.py run the rules",
}

# Lines inside marked blocks that are not run as written (keyed by the line's start), and why.
SKIPPED_LINES = {
    "journalctl -u slacker-agent": "no journald: the unit's output goes to the test's log file, read on failure",
    "slacker credential show --scope monitor | ssh": "no other machine to ssh to; minting is the router line above",
}
# Lines the test runs differently: systemd is not PID 1 here, so a `systemctl` line starts (or stops) the
# ExecStart of the unit in deploy/systemd as its User/Group, with its UMask, LimitNOFILE and
# EnvironmentFile, in the host's namespace; a stop is SIGTERM to the main process (KillMode=process).
SYSTEMCTL = re.compile(r"^systemctl (enable --now|restart|disable --now) (slacker-agent|slacker-router)$")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    mark: str | None


def blocks(path: Path = DEPLOYMENT) -> list[Block]:
    """Every fenced block of the page, with the operator-path mark on the line before it (if any)."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            lang = lines[i][3:].strip()
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            m = _MARK.match(lines[i - 1].strip()) if i > 0 else None
            out.append(Block(i + 1, lang, "\n".join(lines[i + 1:j]) + "\n", m.group(1) if m else None))
            i = j + 1
        else:
            i += 1
    return out


def marks_in_page(path: Path = DEPLOYMENT) -> list[str]:
    """Every mark written in the page, also one not directly above a fence (the unit test refuses it)."""
    return [m.group(1) for m in map(_MARK.match, (s.strip() for s in path.read_text().splitlines())) if m]


def marked(path: Path = DEPLOYMENT) -> dict[str, Block]:
    return {b.mark: b for b in blocks(path) if b.mark}


def command_lines(text: str) -> list[str]:
    """The block's command lines, without comments and blank lines (a comment-only line is prose)."""
    out = []
    for raw in text.splitlines():
        line = _strip_comment(raw).strip()
        if line:
            out.append(line)
    return out


def _strip_comment(line: str) -> str:
    """A shell line without its trailing `# ...` comment (not inside quotes)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k]
    return line


def comment(line: str) -> str:
    return line[len(_strip_comment(line)):].lstrip("# ").strip()


def skipped(line: str) -> str | None:
    return next((why for start, why in SKIPPED_LINES.items() if line.startswith(start)), None)
