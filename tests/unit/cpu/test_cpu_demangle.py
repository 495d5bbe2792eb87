"""One demangler for the agent: the batch form the GPU receiver's kernel names need."""

from kubeprof.agent.cpu.demangle import demangle_many


def test_demangle_many_maps_each_mangled_name_once():
    out = demangle_many(["_ZNK6shapes6Circle4areaEi", "nvjet_x", "_ZNK6shapes6Circle4areaEi"])
    assert out == {"_ZNK6shapes6Circle4areaEi": "shapes::Circle::area(int) const"}
