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
