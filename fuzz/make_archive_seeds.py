#!/usr/bin/env python3
# Seeds for kiln_archive_fuzzer (fuzz/seeds/archive_fuzzer/): pickles and torch.save zips written by
# Python's own pickler, the way torch.save writes them (stand-ins for torch's globals; no torch needed).
# The other seeds there are fixtures with a mode byte in front: 0 data.pkl, 1 torch.save zip, 2 .pt2.
#   python3 fuzz/make_archive_seeds.py fuzz/seeds/archive_fuzzer
import sys, types, pickle, collections, io, zipfile, os
out = sys.argv[1]
torch = types.ModuleType('torch'); utils = types.ModuleType('torch._utils')
sys.modules['torch'] = torch; sys.modules['torch._utils'] = utils; torch._utils = utils
def mk_class(name):
    c = type(name, (), {}); c.__module__ = 'torch'; c.__qualname__ = name; setattr(torch, name, c); return c
FloatStorage, LongStorage, HalfStorage = mk_class('FloatStorage'), mk_class('LongStorage'), mk_class('HalfStorage')
def mk_fn(name):
    def f(*a): pass
    f.__module__ = 'torch._utils'; f.__name__ = f.__qualname__ = name; setattr(utils, name, f); return f
v2, param = mk_fn('_rebuild_tensor_v2'), mk_fn('_rebuild_parameter')
class Storage:
    def __init__(s, typ, key, n): s.typ, s.key, s.n = typ, key, n
class T:
    def __init__(s, st, off, size, stride): s.a = (st, off, size, stride)
    def __reduce__(s): return (v2, s.a + (False, collections.OrderedDict()))
class P:
    def __init__(s, t): s.t = t
    def __reduce__(s): return (param, (s.t, True, collections.OrderedDict()))
class Pk(pickle.Pickler):
    def persistent_id(s, o):
        return ('storage', o.typ, o.key, 'cpu', o.n) if isinstance(o, Storage) else None
def dumps(obj, proto):
    b = io.BytesIO(); Pk(b, protocol=proto).dump(obj); return b.getvalue()
# The legacy mlp fixture's state dict (tests/import/archive_test.cpp imports these): parameters,
# a transposed view, a view at an offset, storages shared by two tensors.
s0, s1, s2, s3 = Storage(FloatStorage, '0', 8192), Storage(FloatStorage, '1', 128), Storage(FloatStorage, '2', 1280), Storage(FloatStorage, '3', 12)
d = collections.OrderedDict()
d['fc1.weight'] = P(T(s0, 0, (128, 64), (64, 1)))
d['fc1.bias'] = P(T(s1, 0, (128,), (1,)))
d['fc2.weight'] = P(T(s2, 0, (10, 128), (1, 10)))   # transposed: storage is (128, 10)
d['fc2.bias'] = P(T(s3, 2, (10,), (1,)))
import struct
data = {'0': struct.pack('<8192f', *[i / 8192 for i in range(8192)]), '1': struct.pack('<128f', *range(128)),
        '2': struct.pack('<1280f', *[(k % 10) * 1000 + k // 10 for k in range(1280)]), '3': struct.pack('<12f', 9, 9, *range(10))}
for proto in (2, 4):
    pk = dumps(d, proto)
    open(os.path.join(out, f'pkl_proto{proto}'), 'wb').write(b'\x00' + pk)
    z = io.BytesIO()
    with zipfile.ZipFile(z, 'w', zipfile.ZIP_STORED) as zf:
        zf.writestr('archive/data.pkl', pk); zf.writestr('archive/byteorder', 'little')
        for k, v in data.items(): zf.writestr('archive/data/' + k, v)
        zf.writestr('archive/version', '3\n')
    open(os.path.join(out, f'torchsave_proto{proto}'), 'wb').write(b'\x01' + z.getvalue())
# The zip reader's own structures: the legacy counter fixture re-zipped deflated, written as a
# stream (data descriptors, ZIP64 extra fields in the local headers), its nested torch.save
# zips deflated too (read into memory, not in place).
fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared', 'fixtures',
                       'torch_export_stateful', 'counter', 'model.pt2')
if os.path.exists(fixture):
    z = io.BytesIO()
    with zipfile.ZipFile(fixture) as src, zipfile.ZipFile(z, 'w', zipfile.ZIP_DEFLATED) as zf:
        for info in src.infolist():
            with zf.open(info.filename, 'w', force_zip64=True) as w:
                w.write(src.read(info.filename))
    open(os.path.join(out, 'legacy_counter_deflated_zip64'), 'wb').write(b'\x02' + z.getvalue())
