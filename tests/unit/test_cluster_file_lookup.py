"""Which cluster file the CLI uses: --cluster, $SLACKER_CLUSTER, the system file, then ./run."""


def test_cluster_file_lookup_prefers_the_system_file(tmp_path, monkeypatch):
    from slacker import config

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "cluster.toml").write_text("")
    system = tmp_path / "etc-cluster.toml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLACKER_CLUSTER", raising=False)
    monkeypatch.setattr(config, "DEFAULT_CLUSTER_PATHS",
                        ((system, "the system file"), (config.LOCAL_CLUSTER_FILE, "the working directory")))
    assert config.find_cluster_file(None) == (config.LOCAL_CLUSTER_FILE, "the working directory")
    system.write_text("")
    assert config.find_cluster_file(None) == (system, "the system file")
    monkeypatch.setenv("SLACKER_CLUSTER", "/x/c.toml")
    assert config.find_cluster_file(None) == (config.Path("/x/c.toml"), "$SLACKER_CLUSTER")
    assert config.find_cluster_file("/y.toml") == (config.Path("/y.toml"), "--cluster")


def _cluster_file(tmp_path, directory_url: str = "http://127.0.0.1:1"):
    """A cluster file without [[nodes]]: its members are the directory's, served by node-1's agent."""
    (tmp_path / "token").write_text("a" * 64 + "\n")
    (tmp_path / "token").chmod(0o600)
    path = tmp_path / "cluster.toml"
    path.write_text(f'token_file = "{tmp_path}/token"\ndirectory = "node-1"\ndirectory_url = "{directory_url}"\n')
    return path


def test_the_cli_loads_the_directory_client_when_it_first_reads_the_members(tmp_path):
    """The agent client (http.client, ssl, the directory backends) is not part of the CLI's start: a
    cluster file the CLI loads imports it when its members are first read (issue 68)."""
    import subprocess
    import sys

    code = ("import sys\nfrom slacker.cli.common import load_cluster\n"
            f"c = load_cluster({str(_cluster_file(tmp_path))!r})\n"
            "print('slacker.agent.client' in sys.modules, end=' ')\n"
            "nodes = c.nodes  # the directory cannot be reached (port 1): the directory's own node\n"
            "print('slacker.agent.client' in sys.modules, sorted(nodes))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False True ['node-1']"


def test_the_cli_learns_the_members_from_the_directory(tmp_path, monkeypatch):
    """`slacker status`, `locate` and the rest find a node the file does not name: through the lazy
    factory the CLI sets, the directory's members (here a fake directory) are the cluster's nodes."""
    from slacker.agent import client
    from slacker.cli.common import load_cluster
    from slacker.config import Cluster
    from slacker.directory.base import Member

    class Directory:
        def members(self):
            return [Member("node-1", "http://127.0.0.1:1", "127.0.0.1"),
                    Member("node-7", "http://10.0.0.7:8800", "10.0.0.7")]

        def removed_members(self):
            return set()

    asked = []
    monkeypatch.setattr(Cluster, "directory_factory", None)  # as in a fresh CLI process
    monkeypatch.setattr(client, "directory_for", lambda cluster, token: asked.append(token) or Directory())
    cluster = load_cluster(str(_cluster_file(tmp_path)))
    assert asked == []  # loading the file reads no members
    assert cluster.node("node-7").url == "http://10.0.0.7:8800"
    assert sorted(cluster.nodes) == ["node-1", "node-7"] and asked == ["a" * 64]
