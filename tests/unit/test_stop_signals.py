"""relay/run/stop.py: a first SIGINT / SIGTERM asks the loop to stop after its step, a second abandons
it; the stopped run's one line names the exact `--resume` command. Signals are sent to this
process (the handlers are installed on the main thread, where pytest runs tests)."""

import os
import shlex
import signal

import pytest

from relay.checkpoint.manifest import MANIFEST
from relay.run.stop import RunStopped, StopOnSignal, resume_command, stop_line


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_first_signal_asks_to_stop_and_the_loop_decides_when(tmp_path, signum, exit_code):
    before = signal.getsignal(signum)
    with pytest.raises(RunStopped) as stopped:
        with StopOnSignal(tmp_path) as stop:
            assert not stop.requested
            os.kill(os.getpid(), signum)  # handled at the next bytecode: no exception, a flag
            assert stop.requested and stop.signum == signum
            raise stop.stopped(7)  # what the loop does once step 7 is finished
    assert (stopped.value.step, stopped.value.exit_code, stopped.value.run_dir) == (7, exit_code, tmp_path)
    assert signal.getsignal(signum) is before  # the previous handler is back


def test_second_signal_abandons_the_step_in_progress(tmp_path):
    with pytest.raises(RunStopped) as stopped:
        with StopOnSignal(tmp_path):
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)  # raises KeyboardInterrupt here, as inside ray.get
            pytest.fail("the second signal did not interrupt")
    assert stopped.value.step is None and stopped.value.exit_code == 128 + signal.SIGTERM  # the first one's


def test_an_interrupt_without_a_signal_stays_an_interrupt(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with StopOnSignal(tmp_path):
            raise KeyboardInterrupt


def test_resume_command_keeps_the_arguments_and_names_the_run_folder(tmp_path):
    argv = ["--config", "configs/my run.yaml", "run.name=exp", "--resume", "training.lr=1e-5"]
    command = resume_command(argv, tmp_path / "exp-1")  # a fresh run named exp found exp taken
    assert shlex.split(command) == [
        "python",
        "driver.py",
        "--resume",
        "--config",
        "configs/my run.yaml",
        "training.lr=1e-5",
        "run.name=exp-1",
    ]


def test_stop_line_says_what_is_saved(tmp_path):
    run_dir = tmp_path / "exp"
    line = stop_line(RunStopped(signal.SIGINT, run_dir, None), [])
    assert line == (
        "relay: stopped by SIGINT abandoning the step in progress; no checkpoint yet (resuming starts over); "
        "resume: python driver.py --resume run.name=exp"
    )
    checkpoint = run_dir / "checkpoints" / "step_00000004"
    checkpoint.mkdir(parents=True)
    (checkpoint / MANIFEST).write_text("{}")
    line = stop_line(RunStopped(signal.SIGTERM, run_dir, 4), ["training.steps=9"])
    assert line == (
        f"relay: stopped by SIGTERM after step 4; latest checkpoint {checkpoint}; "
        "resume: python driver.py --resume training.steps=9 run.name=exp"
    )
    # the installed command: its resume line names it, not the repository's script
    assert stop_line(RunStopped(signal.SIGTERM, run_dir, 4), ["training.steps=9"], "relay train").endswith(
        "resume: relay train --resume training.steps=9 run.name=exp"
    )
