"""Loads the C launch hook from the folder in argv[1] and checks its call-site keys.

Run by every interpreter under test (tests/unit/gpu/test_launchhook_versions.py here,
tests/gpu/hook_versions_run.sh on the GPU machine). It prints
``[1] [2] ['layer', 'layer'] 2`` when the hook keys whole stacks: the same caller always
the same id, a different caller a new one, one walk each. Given the interpreter frames'
offsets (argv[2], JSON: frame_keys.offsets of that version), it checks the same with the
keys read from the frames in place, and for a caller that C called back, and prints
``raw True [1] [2] [3] ['leaf', 'leaf', 'leaf'] 3`` (there the walk starts at the frame that
calls the hook).
"""

import json
import sys

sys.path.insert(0, sys.argv[1])
import _launchhook as hook

walked = []


def walk(frame):
    walked.append(frame.f_code.co_name)
    return len(walked)


def leaf():
    if RAW:
        return hook.site_here(walk)
    return hook.site_for(sys._getframe(1), walk)


def layer():
    return leaf()


def from_prefill():
    return layer()


def from_decode():
    return layer()


RAW = False
a = {from_prefill() for _ in range(5)}
b = {from_decode() for _ in range(5)}
print(sorted(a), sorted(b), walked, hook.stats()["walks"])
if len(sys.argv) > 2:
    on = hook.raw_frames(tuple(json.loads(sys.argv[2])))
    RAW, walked[:] = True, []
    before = hook.stats()["walks"]
    a = {from_prefill() for _ in range(5)}
    b = {from_decode() for _ in range(5)}
    c = set(map(lambda _: layer(), range(5)))  # Python that C called (3.12+: an entry frame)
    print("raw", on, sorted(a), sorted(b), sorted(c), walked, hook.stats()["walks"] - before)
