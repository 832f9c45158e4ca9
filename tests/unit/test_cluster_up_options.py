"""`cluster up` on an existing run directory: options not given come from the cluster file."""

from slacker.config import write_toml
from slacker.local_cluster import recorded_options, with_recorded

ASKED = {"nodes": 2, "first_address": "127.0.0.2", "api_port": 7701, "port_range": "13306-23305",
         "directory": "sqlite", "directory_node": "node-1", "etcd_client_port": 2379, "etcd_peer_port": 2380,
         "cpu_per_node": None, "disk_read_per_node": None, "netns": False, "netns_subnet": "10.77.0.0/24",
         "stats_interval_s": None, "tls": None, "fault_injection": False, "router": "127.0.0.1:6033"}


def cluster_file(run_dir, up=None, nodes=3, scheme="https", host="127.0.0.20", **top):
    run_dir.mkdir(exist_ok=True)
    specs = [{"name": f"node-{i + 1}", "url": f"{scheme}://127.0.0.{20 + i}:7811", "tenant_host": f"127.0.0.{20 + i}"}
             for i in range(nodes)]
    doc = {"token_file": str(run_dir / "token"), "directory": "node-1", **top}
    if scheme == "https":
        doc["tls_ca"] = str(run_dir / "tls" / "ca.crt")
    tables = {"nodes": specs}
    if up is not None:
        tables = {"up": up, **tables}
    write_toml(run_dir / "cluster.toml", doc, tables)


def test_no_cluster_there_changes_nothing(tmp_path):
    assert recorded_options(tmp_path) == {}
    assert with_recorded(tmp_path, ASKED, set()) == ASKED


def test_options_left_out_come_from_the_up_table(tmp_path):
    made = dict(ASKED, nodes=3, first_address="127.0.0.20", api_port=7811, tls=True, router="127.0.0.1:6091",
                cpu_per_node=0.6, fault_injection=True)
    cluster_file(tmp_path, up={k: v for k, v in made.items() if v is not None})
    assert with_recorded(tmp_path, ASKED, set()) == made
    # given options stand as given (`up` then refuses those that change the cluster's shape)
    again = with_recorded(tmp_path, ASKED, {"nodes", "router"})
    assert again["nodes"] == 2 and again["router"] == "127.0.0.1:6033" and again["api_port"] == 7811


def test_no_router_is_recorded_as_none(tmp_path):
    cluster_file(tmp_path, up={"nodes": 3, "router": ""})
    assert with_recorded(tmp_path, ASKED, set())["router"] == ""


def test_a_file_from_before_the_up_table_tells_its_shape(tmp_path):
    cluster_file(tmp_path, directory_backend="etcd",
                 etcd_endpoints=["https://127.0.0.20:2479", "https://127.0.0.21:2479", "https://127.0.0.22:2479"])
    (tmp_path / "node-1").mkdir()
    write_toml(tmp_path / "node-1" / "agent.toml", {"node": "node-1", "port_range": "30000-30999",
                                                   "fault_injection": True, "stats_interval": 2.0})
    got = with_recorded(tmp_path, ASKED, set())
    assert got == dict(ASKED, nodes=3, first_address="127.0.0.20", api_port=7811, tls=True, directory="etcd",
                       etcd_client_port=2479, port_range="30000-30999", fault_injection=True, stats_interval_s=2.0)


def test_a_namespaced_cluster_is_known_by_its_subnet(tmp_path):
    cluster_file(tmp_path, local_subnet="10.80.1.0/24")
    got = recorded_options(tmp_path)
    assert got["netns"] is True and got["netns_subnet"] == "10.80.1.0/24" and "first_address" not in got
