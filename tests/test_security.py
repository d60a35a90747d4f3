"""A pool on a shared host: nobody but its user can reach it, read its files or forge its messages,
and a notebook killed outright leaves nothing behind (see docs/guide/security.md)."""

from __future__ import annotations

import glob
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import zmq
from _processes import SKIP_ON_INTEL, intel_mpi, wait_until_gone

import mpinb
from mpinb.common._leftover_files import mpi_segments

pytestmark = [pytest.mark.every_mpi, SKIP_ON_INTEL]

STRANGER = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
can_be_a_stranger = os.geteuid() == 0 and psutil.POSIX and os.path.exists("/usr/bin/setpriv")


def _private(path: str) -> bool:
    info = os.lstat(path)
    return info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077 == 0


# Where each rank's ZeroMQ sockets are bound or connected (a cell: run on the ranks).
ZMQ_ENDPOINTS = """
import gc as _gc, zmq as _zmq
_found = []
for _thing in _gc.get_objects():
    try:
        if isinstance(_thing, _zmq.Socket) and not _thing.closed:
            _found.append(_thing.getsockopt_string(_zmq.LAST_ENDPOINT))
    except Exception:
        pass
_found
"""


def test_a_local_pool_listens_in_a_folder_of_its_user_only():
    with mpinb.Pool(3) as pool:
        supervisor = pool._supervisor
        folder = supervisor.run_folder
        assert folder and _private(folder) and _private(os.path.dirname(folder))
        sockets = os.listdir(folder)
        assert "deathwatch" in sockets and "relay-runs" in sockets and any(name.startswith("c:") for name in sockets)
        controller = psutil.Process(supervisor.cluster.controller.pid)
        listening = [c for proc in [controller, *controller.children(recursive=True)]
                     for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert not listening, f"the controller listens on the network: {listening}"
        for rank, ends in pool.run(ZMQ_ENDPOINTS).value.items():
            assert ends and not [end for end in ends if end.startswith("tcp://")], (rank, ends)
        assert pool.run("comm.allreduce(rank)").value == {0: 3, 1: 3, 2: 3}
        if can_be_a_stranger:
            probe = textwrap.dedent(f"""
                import os, socket
                folder = {folder!r}
                for name in ["deathwatch", "relay-runs", *[n for n in {sockets!r} if n.startswith("c:")]]:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    try:
                        s.connect(os.path.join(folder, name))
                    except PermissionError:
                        continue
                    print("reached", name)
                try:
                    os.listdir(folder)
                    print("listed the folder")
                except PermissionError:
                    pass
            """)
            stranger = subprocess.run([*STRANGER, "/usr/bin/python3", "-c", probe],
                                      capture_output=True, text=True, timeout=30)
            assert stranger.returncode == 0, stranger.stderr
            assert stranger.stdout == "", f"another user reached the pool: {stranger.stdout}"
    assert not os.path.exists(folder), "the folder goes with the pool"


def test_the_profile_logs_and_shared_memory_files_are_private():
    from mpinb.common import _shared_memory

    np = pytest.importorskip("numpy")
    with mpinb.Pool(2) as pool:
        profile = pool._supervisor.cluster.profile_dir
        for folder in (profile, os.path.join(profile, "log"), os.path.join(profile, "security")):
            assert _private(folder), folder
        pool.push({"big": np.arange(2**18, dtype=float)})  # 2 MB: through /dev/shm
        assert pool.run("float(big.sum())").value[1] == float(np.arange(2**18).sum())
    shared = _shared_memory.write(np.ones(2**18))
    try:
        assert stat.S_IMODE(os.stat(shared["path"]).st_mode) == 0o600
    finally:
        _shared_memory.remove(shared["path"])


@pytest.mark.unit
def test_the_relay_never_signs_with_an_empty_key():
    from mpinb.rank._relay import _Signer

    with pytest.raises(ValueError, match="never runs without a key"):
        _Signer(b"")


@pytest.mark.unit
def test_only_a_rank_that_says_a_signed_hello_counts_as_joined():
    """A stranger's subscription (ZeroMQ counts it like any other) or unsigned hello is no rank."""
    from mpinb.rank._relay import _HELLO, _Hub, _Signer

    signer = _Signer(os.urandom(32))
    hub = _Hub(("tcp://127.0.0.1:0", "tcp://127.0.0.1:0"), signer)
    runs, replies = hub.addresses()
    context = zmq.Context.instance()
    listener, speaker = context.socket(zmq.SUB), context.socket(zmq.PUSH)
    try:
        listener.setsockopt(zmq.SUBSCRIBE, b"")
        listener.connect(runs)
        speaker.connect(replies)
        speaker.send_multipart([b"0 1", _HELLO, b"a forged signature"])
        assert hub.wait_for_members({1}, timeout=0.5) == set()
        speaker.send_multipart([b"0 1", _HELLO, _Signer(b"another key").sign(b"0 1", _HELLO)])
        assert hub.wait_for_members({1}, timeout=0.5) == set()
        speaker.send_multipart([b"0 1", _HELLO, signer.sign(b"0 1", _HELLO)])
        assert hub.wait_for_members({1}, timeout=5) == {1}
    finally:
        for sock in (listener, speaker, hub.runs, hub.replies):
            sock.close(linger=0)


def test_a_local_pool_can_be_encrypted_too():
    """Across hosts a pool is encrypted by default; here on request (`%mpi start --encrypt`):
    every socket, ipyparallel's and the relay's, and every message still signed."""
    assert not mpinb.Pool(2).settings.encrypted and mpinb.Pool(2, mpiexec_args=["-hosts", "n1,n2"]).settings.encrypted
    with mpinb.Pool(3, encrypt=True) as pool:
        client = pool._supervisor.client
        assert client._config.get("curve_serverkey") and client.session.key
        assert pool.run("print(rank)\nrank * 2").value == {0: 0, 1: 2, 2: 4}
        assert pool._supervisor.route.relaying and pool.last_result.stdout == {r: f"{r}\n" for r in range(3)}


# Another user, listening to every TCP port given: a SUB socket subscribed to everything on each
# (what ipyparallel's output and the relay's runs are published on), printing what arrives.
EAVESDROPPER = """
import sys, time, zmq
context = zmq.Context()
poller = zmq.Poller()
for port in sys.argv[1:]:
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(f"tcp://127.0.0.1:{port}")
    poller.register(sock, zmq.POLLIN)
print("listening", flush=True)
heard = []
until = time.monotonic() + float(8)
while time.monotonic() < until:
    for sock, _ in poller.poll(100):
        heard += sock.recv_multipart()
sys.stdout.write(repr(b"".join(heard)))
"""


def _pool_tcp_ports(pool: mpinb.Pool) -> list[int]:
    """The TCP ports the pool's controller and ranks listen on."""
    controller = psutil.Process(pool._supervisor.cluster.controller.pid)
    ranks = [psutil.Process(row["pid"]) for row in pool.status()]
    processes = [controller, *controller.children(recursive=True), *ranks]
    return sorted({c.laddr.port for proc in processes for c in proc.net_connections(kind="tcp")
                   if c.status == psutil.CONN_LISTEN})


def _what_a_stranger_hears(pool: mpinb.Pool, cell: str) -> str:
    """Everything another user reads on the pool's TCP ports while ``cell`` runs, twice."""
    stranger = subprocess.Popen([*STRANGER, sys.executable, "-c", EAVESDROPPER, *map(str, _pool_tcp_ports(pool))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert stranger.stdout.readline() == "listening\n", stranger.stderr.read()
        time.sleep(1.0)  # the subscriptions reach the publishers
        for _ in range(2):
            pool.run(cell)
        heard, errors = stranger.communicate(timeout=30)
    finally:
        stranger.kill()
        stranger.wait()
    assert stranger.returncode == 0, errors
    return heard


@pytest.mark.skipif(not can_be_a_stranger, reason="needs root, to be another user (setpriv)")
def test_a_local_pool_given_an_address_is_encrypted_and_another_user_reads_nothing():
    """``controller_ip`` puts a pool on this host on TCP, where any local user can connect: it is
    encrypted as a pool across hosts is, and ``encrypt=False`` warns of exactly what another user
    then reads (which this test reads, as ``nobody``, to show the warning true)."""
    cell = "print('secret-output-' + 'x' * 3)\nsecret_cell_source = 1"
    with mpinb.Pool(3, controller_ip="127.0.0.1") as pool:
        assert pool.settings.encrypted and _pool_tcp_ports(pool), "on TCP, and encrypted"
        heard = _what_a_stranger_hears(pool, cell)
        assert "secret" not in heard, f"another user read the pool: {heard[:300]}"
        assert pool.last_result.stdout[0] == "secret-output-xxx\n"
    with pytest.warns(UserWarning, match="any user of this host who connects to its ports reads the cells"):
        pool = mpinb.Pool(3, controller_ip="127.0.0.1", encrypt=False).start()
    with pool:
        heard = _what_a_stranger_hears(pool, cell)
        assert "secret_cell_source" in heard or "secret-output" in heard, "the warning is true: a stranger reads it"


def _stranger_with_keys(kind: int, address: str, hub_public: bytes) -> zmq.Socket:
    """A socket of someone who knows the relay's public key (CurveZMQ takes it as public) but
    is not a rank: a key pair of their own."""
    public, secret = zmq.curve_keypair()
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = hub_public, public, secret
    sock.connect(address)
    return sock


@pytest.mark.unit
def test_an_encrypted_relay_lets_in_the_ranks_key_only():
    from mpinb.common._protocol import relay_keys
    from mpinb.rank._relay import _HELLO, _Hub, _Signer

    signer = _Signer(os.urandom(32))
    hub_keys, member_keys = relay_keys()
    assert not hub_keys["member_secret"] and not member_keys["hub_secret"], "each side its own secret only"
    hub = _Hub(("tcp://127.0.0.1:0", "tcp://127.0.0.1:0"), signer, hub_keys)
    runs, replies = hub.addresses()
    context = zmq.Context.instance()
    listener = _stranger_with_keys(zmq.SUB, runs, hub_keys["hub_public"])
    speaker = _stranger_with_keys(zmq.PUSH, replies, hub_keys["hub_public"])
    member = context.socket(zmq.PUSH)
    member.setsockopt(zmq.LINGER, 0)
    member.curve_serverkey = member_keys["hub_public"]
    member.curve_publickey, member.curve_secretkey = member_keys["member_public"], member_keys["member_secret"]
    try:
        listener.setsockopt(zmq.SUBSCRIBE, b"")
        speaker.send_multipart([b"0 1", _HELLO, signer.sign(b"0 1", _HELLO)])  # even knowing the HMAC key
        assert hub.wait_for_members({1}, timeout=1.0) == set(), "the stranger's hello never arrives"
        assert not listener.poll(200), "and the stranger hears none of the pings"
        member.connect(replies)
        member.send_multipart([b"0 2", _HELLO, signer.sign(b"0 2", _HELLO)])
        assert hub.wait_for_members({2}, timeout=5) == {2}, "a rank's key gets in"
    finally:
        for sock in (listener, speaker, member, hub.runs, hub.replies):
            sock.close(linger=0)
        hub.authenticator.stop()


@pytest.mark.unit
def test_a_frame_larger_than_a_reply_may_be_never_reaches_rank_0s_memory():
    """Rank 0 drops the connection of whoever sends more than ``max_reply_bytes`` in one frame,
    and goes on gathering the others' replies."""
    from mpinb.rank._relay import _HELLO, _Hub, _Signer

    signer = _Signer(os.urandom(32))
    hub = _Hub(("tcp://127.0.0.1:0", "tcp://127.0.0.1:0"), signer, max_reply_bytes=2**20)
    _, replies = hub.addresses()
    context = zmq.Context.instance()
    flooder, rank1 = context.socket(zmq.PUSH), context.socket(zmq.PUSH)
    try:
        for sock in (flooder, rank1):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(replies)
        flooder.send_multipart([b"1 1", b"x" * 2**22, b"signature"], copy=False)
        rank1.send_multipart([b"0 1", _HELLO, signer.sign(b"0 1", _HELLO)])
        assert hub.wait_for_members({1}, timeout=5) == {1}
        assert not hub.replies.poll(200), "the large frame was dropped, not queued"
    finally:
        for sock in (flooder, rank1, hub.runs, hub.replies):
            sock.close(linger=0)


def test_a_reply_too_large_for_the_relay_is_fetched_from_its_rank_exactly(monkeypatch):
    import numpy as np

    from mpinb.common._protocol import KEPT_REPLY
    from mpinb.pool._pending import Relayed
    from mpinb.rank._relay import MAX_REPLY_BYTES

    notes: list = []
    fetch = Relayed._fetch_kept
    monkeypatch.setattr(Relayed, "_fetch_kept", lambda self, gathered: fetch(self, notes.append(gathered) or gathered))
    rows = MAX_REPLY_BYTES // 8 + 1000
    with mpinb.Pool(3) as pool:
        result = pool.run(f"import numpy as np\nnp.arange({rows}, dtype=float) + rank")
        assert [reply == KEPT_REPLY for reply in notes[-1]] == [False, True, True], "ranks 1-2 kept theirs"
        for rank in range(3):
            assert np.array_equal(result.value[rank], np.arange(rows, dtype=float) + rank)
        left = pool.run("from mpinb.rank import _relay\n_relay._member.kept if _relay._member else {}", targets="1-2")
        assert left.value == {1: {}, 2: {}}, "taken, not kept on the ranks"


def test_a_killed_notebook_leaves_no_process_and_no_file(existing_pools):
    """SIGKILL gives the notebook no chance to clean up: the watchdog sweeps what the pool made."""
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import json, os, sys
            import mpinb
            pool = mpinb.Pool(3).start()
            pool.run("import numpy as np\\ncomm.Allreduce(np.ones(2**20), np.empty(2**20))")
            # what a rank has written in the middle of a pull, when the notebook dies
            pool.run("from mpinb.common._shared_memory import write\\npulled = write(np.ones(2**20))")
            supervisor = pool._supervisor
            cluster = supervisor.cluster
            print(json.dumps({"run": supervisor.run_folder, "stacks": supervisor.stacks_folder,
                              "profile": cluster.profile_dir, "id": cluster.cluster_id,
                              "pids": [row["pid"] for row in pool.status()]}), flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        made = json.loads(owner.stdout.readline())
        pattern = f"*{made['id']}*"
        files = [*glob.glob(os.path.join(made["profile"], "security", pattern)),
                 *glob.glob(os.path.join(made["profile"], "log", pattern))]
        assert files and os.path.isdir(made["run"]) and os.path.isdir(made["stacks"])
        segments = {path for path, _ in mpi_segments(made["pids"])}  # (this pool's: others may run beside)
        pulled = [path for pid in made["pids"] for path in glob.glob(f"/dev/shm/mpinb-{pid}-*")]
        assert len(pulled) == 3, "each rank's half of a pull in flight"
        assert segments or intel_mpi(), "the ranks map MPI's segments (Intel MPI unlinks its own at once)"
        owner.send_signal(signal.SIGKILL)
        owner.wait(5)
        assert not wait_until_gone(10, existing_pools), "a SIGKILLed owner must not leave ranks running"
        deadline = time.monotonic() + 10
        left = None
        while time.monotonic() < deadline:
            left = [path for path in [made["run"], made["stacks"], *files, *segments, *pulled] if os.path.exists(path)]
            if not left:
                break
            time.sleep(0.1)
        assert not left, f"left behind after the notebook was killed: {left}"
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                       for pid in made["pids"])
    finally:
        owner.kill()
