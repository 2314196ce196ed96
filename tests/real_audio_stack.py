"""A real audio stack for tests: a private PulseAudio server with null sinks, reached by the app the way a
desktop reaches it: sounddevice -> PortAudio -> ALSA -> ALSA's pulse plugin -> PulseAudio.

A null sink is a loudspeaker that plays into nothing; its `.monitor` source hears what it plays, so speech
played into the sink is what the app's microphone (the default source = the monitor) records, and what the
app plays (the default sink) can be captured again. The server runs with its own runtime directory in a
tmp folder, so it never touches (or needs) a desktop session, and ends with the test.

Debian packages: pulseaudio, pulseaudio-utils (pactl, pacat), libasound2-plugins (ALSA's pulse plugin),
libportaudio2. `make test` installs them when run as root. Without them the tests are skipped, saying so.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

PACKAGES = "pulseaudio pulseaudio-utils libasound2-plugins libportaudio2"
INSTALL = f"apt-get install {PACKAGES} (`make test` does it when run as root)"


def _die_with_parent() -> None:
    """Linux: the server and players end with the test process, even when it is killed."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def warm_up(timeout: float = 10.0) -> None:
    """Open the default input once and wait for its first audio. A process's first PulseAudio stream
    through ALSA takes ~2 s to deliver (later ones ~40 ms); tests then measure the app, not that."""
    import sounddevice as sd

    heard = threading.Event()
    with sd.InputStream(samplerate=16000, channels=1, dtype="float32", callback=lambda *a: heard.set()) as s:
        if not heard.wait(timeout):
            raise RuntimeError(f"the default input delivered no audio in {timeout:g} s")
        s.abort()


def reinit_portaudio() -> None:
    """PortAudio lists devices once, at initialisation: re-list them now that the server is up (or gone).

    sounddevice has no public call for this; `_terminate`/`_initialize` are what it runs at import and exit.
    """
    import sounddevice as sd

    sd._terminate()
    sd._initialize()


class PulseStack:
    """A private PulseAudio server. `add_sink` makes a null sink, the default sink and (its monitor) the
    default source; `play` feeds audio into a sink the way another program would (pacat)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.server = f"unix:{root / 'pulse' / 'native'}"
        self.log = root / "pulseaudio.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.players: list[subprocess.Popen[bytes]] = []
        self.warm = False  # this process has had its first (slow) stream from this server
        # what our clients (pactl, pacat and the app's PortAudio in this process) need to find the server
        client_conf = root / "client.conf"
        client_conf.write_text("autospawn = no\n")
        self.client_env = {"PULSE_SERVER": self.server, "PULSE_CLIENTCONFIG": str(client_conf),
                           "PULSE_RUNTIME_PATH": str(root / "pulse"), "XDG_RUNTIME_DIR": str(root)}

    # ------------------------------------------------------------------------------------ server

    def start(self, timeout: float = 10.0) -> None:
        env = os.environ | self.client_env | {"HOME": str(self.root), "XDG_CONFIG_HOME": str(self.root / "config")}
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                ["pulseaudio", "-n", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no",
                 "--disable-shm=yes", "--log-target=stderr",
                 "-L", "module-native-protocol-unix auth-anonymous=1"],
                env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if subprocess.run(["pactl", "info"], env=self._env(), capture_output=True).returncode == 0:
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"PulseAudio did not start: {self.log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        for p in self.players:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.players.clear()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def _env(self) -> dict[str, str]:
        return os.environ | self.client_env

    def pactl(self, *args: str) -> str:
        done = subprocess.run(["pactl", *args], env=self._env(), capture_output=True, text=True, timeout=10)
        if done.returncode != 0:
            raise RuntimeError(f"pactl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    # ------------------------------------------------------------------------------------ devices

    def add_sink(self, name: str, rate: int = 16000, keep_alive: bool = True) -> int:
        """A mono null sink, made the default sink, its monitor the default source. Returns the module id.

        keep_alive plays silence into it without end: an idle null sink renders its monitor in blocks as
        long as the largest latency any client asked for (up to seconds); a stream with a short latency
        keeps the blocks short, as a real sound card's are. norewinds: a sink that rewinds (to mix a new
        stream in at once) renders some audio twice, and its monitor passes on both renderings."""
        module = int(self.pactl("load-module", "module-null-sink", f"sink_name={name}", f"rate={rate}",
                                "channels=1", "norewinds=1", f"sink_properties=device.description={name}"))
        self.pactl("set-default-sink", name)
        self.pactl("set-default-source", f"{name}.monitor")
        if keep_alive:
            self.players.append(self._pacat(name, rate, stdin=subprocess.DEVNULL, source="/dev/zero"))
        if not self.warm:
            warm_up()
            self.warm = True
        return module

    def unload(self, module: int) -> None:
        self.pactl("unload-module", str(module))

    def _pacat(self, sink: str, rate: int, stdin: int, source: str | None = None, latency_ms: int = 20
               ) -> subprocess.Popen[bytes]:
        args = ["pacat", "--playback", "--raw", "--format=float32le", f"--rate={rate}", "--channels=1",
                f"--latency-msec={latency_ms}", f"--device={sink}"]
        if source is not None:  # pacat plays a file given after the options
            args.append(source)
        return subprocess.Popen(args, env=self._env(), stdin=stdin, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def play(self, sink: str, audio: np.ndarray, rate: int) -> subprocess.Popen[bytes]:
        """Play (N,) float32 audio into `sink` in the background (another program's sound)."""
        p = self._pacat(sink, rate, stdin=subprocess.PIPE, latency_ms=250)  # a deep buffer: no underruns
        data = np.ascontiguousarray(audio, dtype="<f4").tobytes()

        def feed() -> None:  # pacat reads at playback speed: the pipe would block the test
            assert p.stdin is not None
            try:
                p.stdin.write(data)
                p.stdin.close()
            except (BrokenPipeError, ValueError):  # the sink (and pacat) went away: a test may unplug it
                pass

        threading.Thread(target=feed, name="pacat-feed", daemon=True).start()
        self.players.append(p)
        return p


def require_stack() -> None:
    """Skip (with what to install) where the stack cannot be built."""
    missing = [tool for tool in ("pulseaudio", "pactl", "pacat") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"real audio stack unavailable: {', '.join(missing)} not found; {INSTALL}")
    try:
        import sounddevice  # noqa: F401
    except OSError as e:
        pytest.skip(f"real audio stack unavailable: PortAudio missing ({e}); {INSTALL}")


def running_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseStack]:
    """For a fixture: a running private PulseAudio server that this process's PortAudio sees (no sinks yet:
    tests add them); skips the test, saying what to install, where the stack cannot run."""
    require_stack()
    root = tmp_path_factory.mktemp("pulse")  # short: the socket path must stay under 108 bytes
    stack = PulseStack(root)
    try:
        stack.start()
    except RuntimeError as e:
        pytest.skip(f"real audio stack unavailable: {e}")
    try:
        with pytest.MonkeyPatch.context() as env:
            for key, value in stack.client_env.items():
                env.setenv(key, value)
            reinit_portaudio()
            import sounddevice as sd

            names = [str(d["name"]) for d in sd.query_devices()]
            if "pulse" not in names:
                pytest.skip(f"real audio stack unavailable: ALSA's pulse plugin not found (PortAudio sees "
                            f"{names}); {INSTALL}")
            yield stack
    finally:
        stack.stop()
        reinit_portaudio()  # later tests see the machine's own devices again


def aligned(recorded: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, int]:
    """The part of `recorded` that lines up with `reference` (by cross-correlation), and the lag in samples."""
    n = len(recorded) + len(reference)
    size = 1 << (n - 1).bit_length()
    corr = np.fft.irfft(np.fft.rfft(recorded, size) * np.conj(np.fft.rfft(reference, size)), size)
    lag = int(np.argmax(corr[: len(recorded)]))
    return recorded[lag: lag + len(reference)], lag
