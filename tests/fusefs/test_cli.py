"""The `mqfs` command as a person meets it: --version everywhere, progress that moves on a
terminal and stays quiet in a pipe, refusals that say what to run next."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import pytest

from mqfs.store import Message, MessageStore, StoreConfig
from tests import REPO
from tests.fusefs.helpers import MQFS, SMALL, force_unmount, mounted, mqfs, needs_fuse, wait_for_mount
from tests.waits import LIMIT

COMMANDS = ("mount", "umount", "init", "info", "verify", "repair")


def test_version_on_every_command():
    from importlib.metadata import version

    want = f"mqfs {version('mqfs')}"
    for args in ([], *([c] for c in COMMANDS), ["pipeline"], ["pipeline", "stats"]):
        proc = mqfs(*args, "--version")
        assert proc.stdout.strip() == want, (args, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def multi_file_store(tmp_path_factory) -> str:
    """Seven 1 MiB CommitLog files: verify has seven files and many runs to report."""
    root = str(tmp_path_factory.mktemp("progress") / "s")
    cfg = StoreConfig(commitlog_file_size=1 << 20, consume_queue_units=1000, index_slots=1000,
                      index_entries=4000)
    with MessageStore(root, cfg) as s:
        for i in range(6000):
            s.put(Message.create("T", b"x" * 1000, queue_id=i % 3, keys=[f"k{i}"]))
    return root


def _on_a_terminal(command: str, limit: float = LIMIT) -> str:
    """Run a shell command on a real pseudo-terminal (util-linux `script`), 100x30 like a
    small terminal window; what the terminal received."""
    proc = subprocess.run(["script", "-qec", f"stty cols 100 rows 30; {command}", "/dev/null"],
                          capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.spark
def test_a_pipeline_job_on_a_terminal_shows_its_tasks_and_the_commands_whole_time(multi_file_store):
    """'done in T s' counts from the start of the command (Python's and the JVM's start-up
    included: the wait the user had), the job's own part beside it."""
    pytest.importorskip("pyspark")
    started = time.monotonic()
    screen = _on_a_terminal(f"TQDM_MININTERVAL=0 {' '.join(MQFS)} pipeline --master 'local[2]' "
                            f"audit {multi_file_store}", limit=600)
    wall = time.monotonic() - started
    assert "audit: starting Spark (local[2])" in screen, screen
    assert re.search(r"audit: +\d+%\|", screen), screen  # the tasks' bar
    done = re.search(r"audit: (\d+) tasks in (\d+) stages, done in (\d+\.\d) s "
                     r"\(the job (\d+\.\d) s\)", screen)
    assert done, screen
    assert int(done[1]) >= 1 and float(done[4]) < float(done[3]) <= wall


def test_verify_shows_moving_progress_on_a_terminal_and_none_in_a_pipe(multi_file_store):
    # every state drawn (tqdm otherwise redraws at most every 0.1 s, and this store takes
    # about that long): the states shown must be the work moving, file by file
    screen = _on_a_terminal(f"TQDM_MININTERVAL=0 {' '.join(MQFS)} verify {multi_file_store}")
    states = [int(p) for p in re.findall(r"verify:\s+(\d+)%\|", screen)]
    before_done = sorted({p for p in states if p < 100})
    assert len(before_done) >= 4, screen
    assert states == sorted(states) and states[-1] == 100, screen
    assert re.search(r"6000 CommitLog records, 6000 ConsumeQueue entries, 6000 IndexFile "
                     r"entries checked \(xxhash flavor\) in \d+\.\d s", screen), screen

    piped = mqfs("verify", multi_file_store)
    assert piped.stderr == "", piped.stderr
    assert "%" not in piped.stdout and "\r" not in piped.stdout
    assert piped.stdout.splitlines()[-1].startswith("6000 CommitLog records")


@needs_fuse
@pytest.mark.mount
def test_a_mounted_store_is_named_with_its_mount_and_what_to_run(tmp_path):
    store, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    mqfs("init", store, *SMALL)
    with mounted(store, mnt):
        info = mqfs("info", store)  # a read-only open: it reads, and says where live figures are
        refused = [mqfs(command, store, check=False) for command in ("verify", "repair")]
    assert f"mounted      on {mnt} (live figures: {mnt}/status.json)" in info.stdout, info.stdout
    for proc in refused:
        assert proc.returncode == 1
        line = proc.stderr.strip()
        assert "\n" not in line
        assert f"mounted on {mnt}" in line and f"mqfs umount {mnt}" in line, line
        assert f"{mnt}/status.json" in line, line


def test_usage_errors_are_one_line_in_the_pipeline_too():
    for args in (["verify"], ["pipeline", "stats"], ["pipeline", "nosuchjob"]):
        proc = mqfs(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "--help" in proc.stderr, (args, proc.stderr)
        assert proc.stdout == ""


def test_help_documents_every_option():
    options = mqfs("init", "--help").stdout.split("options:", 1)[1]
    flavor_help = options.split("--flavor {xxhash,rocketmq}", 1)[1].split("--commitlog-file-size")[0]
    assert "RocketMQ" in flavor_help and "default" in flavor_help, flavor_help
    mount_help = " ".join(mqfs("mount", "--help").stdout.split())
    for option in ("retention_hours=H", "retention_bytes=N", "debug", "-d"):
        assert option in mount_help, option


def test_no_test_writes_the_users_state_directory():
    """conftest points $XDG_STATE_HOME at this run's temporary directory."""
    state = os.environ["XDG_STATE_HOME"]
    assert not state.startswith(os.path.expanduser("~/")), state


@needs_fuse
@pytest.mark.mount
@pytest.mark.parametrize("form", [["mount", "-d"], ["-o", "debug"]], ids=["-d", "-o debug"])
def test_debug_stays_in_the_foreground_and_traces_requests_on_stderr(tmp_path, form):
    store, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    mqfs("init", store, *SMALL)
    os.mkdir(mnt)
    args = [*form[:1], store, mnt, *form[1:]] if form[0] == "mount" else [store, mnt, *form]
    with open(tmp_path / "stderr", "w+") as err:  # a file: a full pipe would stall the daemon
        proc = subprocess.Popen([*MQFS, *args], stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for_mount(mnt, proc)
            assert os.listdir(os.path.join(mnt, "topics")) == []
            assert proc.poll() is None  # still the process that was started: the foreground
            mqfs("umount", mnt)
            assert proc.wait(timeout=LIMIT) == 0
        finally:
            if proc.poll() is None:
                force_unmount(mnt, proc.pid)
        err.seek(0)
        trace = err.read()
    assert re.search(r"opcode: (LOOKUP|READDIR)", trace), trace[-2000:]  # libfuse's trace
    assert re.search(rf"INFO mqfs: mounted {re.escape(store)} on {re.escape(mnt)}", trace), trace[-2000:]


def test_every_mount_option_is_documented_in_help_and_systemd_readme():
    from mqfs.fusefs.options import parse_options

    with pytest.raises(ValueError) as refused:
        parse_options(["bogus"])
    known = re.search(r"\(known: (.*)\)", str(refused.value)).group(1).split(", ")
    names = [k.split("=")[0] for k in known if not k.startswith("flush")] + ["flush"]
    assert len(names) >= 12, known
    mount_help = " ".join(mqfs("mount", "--help").stdout.split())
    root = REPO
    with open(os.path.join(root, "systemd", "README.md")) as f:
        readme = f.read()
    for name in names:
        assert name in mount_help, name
        assert f"`{name}" in readme, name


@pytest.mark.parametrize("job", ["stats", "export", "audit", "rebuild"])
def test_pipeline_refuses_a_path_with_no_store_before_spark_starts(tmp_path, job):
    """No Java at all: had Spark been started, the error would be that it cannot start."""
    missing, out = str(tmp_path / "no-store"), str(tmp_path / "out")
    args = [job, missing] + ([] if job == "audit" else [out])
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([*MQFS, "pipeline", *args], capture_output=True, text=True,
                          timeout=LIMIT, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"mqfs pipeline {job}: {missing} holds no store (no mqfs.json and no commitlog/)\n"
    assert not os.path.exists(out) and not os.path.exists(missing)


def test_pipeline_refuses_an_output_that_exists_before_spark_starts(multi_file_store, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_text("x")
    for job in ("export", "rebuild"):
        proc = subprocess.run([*MQFS, "pipeline", job, multi_file_store, str(out)],
                              capture_output=True, text=True, timeout=LIMIT,
                              env={**os.environ, "JAVA_HOME": str(tmp_path / "no-java")})
        assert proc.returncode == 2
        hint = " (--overwrite replaces it)" if job == "export" else ""
        assert proc.stderr == f"mqfs pipeline {job}: {out} already exists; {job} writes a new directory{hint}\n"
    assert os.listdir(out) == ["old"]


@needs_fuse
@pytest.mark.mount
def test_a_mount_that_recovers_shows_progress_and_what_it_did_on_a_terminal(multi_file_store,
                                                                            tmp_path):
    store, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    shutil.copytree(multi_file_store, store)
    os.mkdir(mnt)
    os.close(os.open(os.path.join(store, "abort"), os.O_WRONLY | os.O_CREAT, 0o600))  # a crash
    try:
        screen = _on_a_terminal(f"TQDM_MININTERVAL=0 {' '.join(MQFS)} mount {store} {mnt}")
    finally:
        if os.path.ismount(mnt):
            mqfs("umount", mnt)
    states = [int(p) for p in re.findall(r"recovery:\s+(\d+)%\|", screen)]
    assert states and states[-1] == 100 and states == sorted(states), screen
    assert re.search(r"mqfs: recovered after an unclean shutdown; CommitLog ends at offset \d+; "
                     r"\d+ records? indexed again \(\d+\.\d s\)", screen), screen


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another user")
def test_a_store_this_user_may_not_read_is_said_so_not_called_no_store(tmp_path):
    """A 0700 store run against as another user: every command says permission denied in
    one line (not "holds no store; create one with mqfs init"), and nothing is changed."""
    top = tmp_path / "top"
    top.mkdir()
    top.chmod(0o755)
    tmp_path.chmod(0o755)
    store = str(top / "store")
    with MessageStore(store, StoreConfig(), create=True) as s:
        s.put(Message.create("t", b"kept"))
    os.chmod(store, 0o700)
    before = sorted((p, os.stat(os.path.join(d, p)).st_mtime_ns) for d, _, fs in os.walk(store) for p in fs)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    for args in (["dump", "-c"], ["info"], ["info", "--json"], ["verify"], ["pipeline", "audit"]):
        r = subprocess.run([*nobody, *MQFS, *args, store], capture_output=True, text=True,
                           timeout=LIMIT, cwd="/")
        assert r.returncode != 0, (args, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "permission denied" in lines[0] and store in lines[0], (args, r.stderr)
        assert "no store" not in r.stderr and "mqfs init" not in r.stderr
    after = sorted((p, os.stat(os.path.join(d, p)).st_mtime_ns) for d, _, fs in os.walk(store) for p in fs)
    assert after == before
