"""Loads the C launch hook from the folder in argv[1] and checks its call-site keys.

Run by every interpreter under test (tests/unit/gpu/test_launchhook_versions.py here,
tests/gpu/hook_versions_run.sh on the GPU machine). It prints
``[1] [2] ['layer', 'layer'] 2`` when the hook keys whole stacks: the same caller always
the same id, a different caller a new one, one walk each.
"""

import sys

sys.path.insert(0, sys.argv[1])
import _launchhook as hook

walked = []


def walk(frame):
    walked.append(frame.f_code.co_name)
    return len(walked)


def leaf():
    return hook.site_for(sys._getframe(1), walk)


def layer():
    return leaf()


def from_prefill():
    return layer()


def from_decode():
    return layer()


a = {from_prefill() for _ in range(5)}
b = {from_decode() for _ in range(5)}
print(sorted(a), sorted(b), walked, hook.stats()["walks"])
