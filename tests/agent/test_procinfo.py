"""The agent names each GPU process from /proc: name, user, command line, container."""

import os

from agent.procinfo import ProcessNames, describe

CONTAINER = "3f1c9a7e5b2d4c6a8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d"


def fake_proc(tmp_path, pid=4242, cgroup=f"0::/system.slice/docker-{CONTAINER}.scope\n"):
    base = tmp_path / str(pid)
    base.mkdir()
    (base / "comm").write_text("python3\n")
    (base / "cmdline").write_bytes(b"python3\0train.py\0--bf16\0")
    (base / "status").write_text(f"Name:\tpython3\nUid:\t{os.getuid()}\t0\t0\t0\n")
    (base / "cgroup").write_text(cgroup)
    return tmp_path


def test_it_reads_name_user_command_and_container(tmp_path):
    import pwd

    info = describe(4242, fake_proc(tmp_path))
    assert info == {"name": "python3", "cmd": "python3 train.py --bf16", "user": pwd.getpwuid(os.getuid()).pw_name,
                    "cgroup": CONTAINER[:12]}


def test_a_plain_cgroup_path_is_kept_and_long_commands_are_cut(tmp_path):
    root = fake_proc(tmp_path, cgroup="0::/user.slice/user-1000.slice/session-3.scope\n")
    (root / "4242" / "cmdline").write_bytes(b"x" * 1000)
    info = describe(4242, root)
    assert info["cgroup"] == "/user.slice/user-1000.slice/session-3.scope"
    assert len(info["cmd"]) == 256


def test_an_unseen_pid_gets_no_description(tmp_path):
    assert describe(999999, tmp_path) == {}
    assert ProcessNames(tmp_path)(999999) == {}


def test_the_nvml_agent_names_the_processes_nvml_reports(fake_nvml, tmp_path):
    from agent.backends import nvml

    fake_nvml()
    fake_proc(tmp_path / "proc")
    entry = nvml._proc_list([type("P", (), {"pid": 4242, "usedGpuMemory": 2**30})()], {})[0]
    assert (entry["name"], entry["cmd"], entry["cgroup"]) == ("python3", "python3 train.py --bf16", CONTAINER[:12])
