"""Names are data, never control: no escape sequence from a profiled program reaches the
terminal through `kubeprof report`, the session's status or a log line (issue 32, item 5)."""

import io
import logging

from kubeprof.model import Frame, FrameKind
from kubeprof.operator.handlers import status_changes
from kubeprof.report.formats import render
from kubeprof.reportdata import Profile, Report, WeightedStack
from kubeprof.safe_text import escape_controls, escape_logs

# Set the window title, write the clipboard (OSC 52), a CSI in its 8-bit C1 form, and a
# right-to-left override that would show the name reversed.
EVIL = "step\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x9b2J\u202eevil"


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if c in "\x1b\x07\x9b\u202e"]


def test_controls_are_spelled_out_and_plain_text_is_untouched():
    assert escape_controls(EVIL) == (
        "step\\x1b]0;owned\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07\\x9b2J\\u202eevil"
    )
    plain = "train_step (train.py:12) <- main"
    assert escape_controls(plain) is plain
    assert escape_controls("a\nb\tc", keep="\n\t") == "a\nb\tc"
    assert escape_controls("a\nb") == "a\\x0ab"


def test_the_text_report_prints_no_escape_sequence():
    stack = (
        Frame("main", FrameKind.PYTHON, "/app/t.py", 1),
        Frame(EVIL, FrameKind.PYTHON, "/app/t.py", 2),
    )
    ws = WeightedStack(stack, 7, 7, "py\x1b[31m", "python", 50, 50 * 10_101_010)
    text = render(Report(Profile("s\x1b]0;t\x07", 99, 1.0, cpu=(ws,))), "text")
    assert isinstance(text, str)
    assert _raw_controls(text) == []
    assert "\\x1b]52;c;cm0gLXJmIH4=" in text and "\n" in text


def test_the_session_status_carries_no_escape_sequence():
    status = {
        "phase": "Completed",
        "topStacks": [f"30 {EVIL} <- main"],
        "findings": [{"message": f"kernel {EVIL} is launch-bound"}],
        "summary": {"pods": [{"name": "ml/p\x1b[2J", "samples": 3}]},
    }
    patch = status_changes({"phase": "Completed"}, status)
    assert "phase" not in patch  # unchanged keys are not patched
    flat = str(patch)
    assert "\x1b" not in flat and "\x9b" not in flat and "\u202e" not in flat
    assert patch["summary"]["pods"][0] == {"name": "ml/p\\x1b[2J", "samples": 3}


def test_log_lines_escape_names_but_keep_tracebacks():
    out = io.StringIO()
    logger = logging.getLogger("kubeprof.test.escapes")
    logger.propagate = False
    handler = logging.StreamHandler(out)
    logger.addHandler(handler)
    try:
        escape_logs(logger)
        logger.warning("refused a batch naming %s\nFAKE: second line", EVIL)
        try:
            raise ValueError("x")
        except ValueError:
            logger.exception("pod %s", "p\x1b[2J")
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert _raw_controls(text) == []
    assert "\\x0aFAKE" in text  # a name cannot start a forged log line
    assert "Traceback (most recent call last):\n" in text
