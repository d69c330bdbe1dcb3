"""ctypes bindings to tandem's engine C ABI (engine/include/tandem_engine.h, libtandem_engine_c.so):
the `tandem_model_*` calls, which leave the training loop — adapter construction, gradient
accumulation, clipping, the optimizer, the schedule, checkpoints — to the caller. Standard library only.

Where things are found: the library from $TANDEM_ENGINE_C_LIB, else <checkout>/build/engine/ next to
this package, else the system's (ldconfig); the `tandem` command line from $TANDEM_BIN, else
<checkout>/build/app/tandem, else PATH.
"""
import ctypes
import ctypes.util
import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT = os.path.normpath(os.path.join(_HERE, "..", "..", ".."))

OK, INVALID_ARGUMENT, IO, STATE, INTERNAL = 0, 1, 2, 3, 4
DROPOUT_OFF, DROPOUT_NATIVE, DROPOUT_SHARED = 0, 1, 2


class EngineError(RuntimeError):
    def __init__(self, call, status, message):
        names = {1: "invalid argument", 2: "I/O", 3: "state", 4: "internal"}
        super().__init__(f"{call}: {message or 'failed'} ({names.get(status, status)})")
        self.status = status


def _find(env_var, build_path, system_lookup, missing):
    """$env_var, else <checkout>/<build_path> when it exists, else system_lookup()'s answer; else
    FileNotFoundError(missing)."""
    env = os.environ.get(env_var)
    if env:
        return env
    local = os.path.join(_CHECKOUT, *build_path)
    if os.path.exists(local):
        return local
    found = system_lookup()
    if found:
        return found
    raise FileNotFoundError(missing)


def find_library():
    return _find("TANDEM_ENGINE_C_LIB", ("build", "engine", "libtandem_engine_c.so"),
                 lambda: ctypes.util.find_library("tandem_engine_c"),
                 "libtandem_engine_c.so not found: build tandem (scripts/build) or set TANDEM_ENGINE_C_LIB")


def find_tandem_cli():
    return _find("TANDEM_BIN", ("build", "app", "tandem"), lambda: shutil.which("tandem"),
                 "the tandem command line was not found: build tandem (scripts/build) or set TANDEM_BIN")


class MicroBatch(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("seq", ctypes.c_int64), ("ids", ctypes.POINTER(ctypes.c_int32)),
                ("supervised", ctypes.POINTER(ctypes.c_int32)), ("lengths", ctypes.POINTER(ctypes.c_int32))]


class ModelOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("rank", ctypes.c_int64), ("alpha", ctypes.c_double),
                ("use_rslora", ctypes.c_int32), ("dropout", ctypes.c_double), ("targets", ctypes.c_char_p),
                ("dropout_mode", ctypes.c_int32), ("threads", ctypes.c_int32), ("seed", ctypes.c_uint64)]


def _bind(lib):
    P, i64, f64, i32, u64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_int32, ctypes.c_uint64
    pi64, pf64, pstr = ctypes.POINTER(i64), ctypes.POINTER(f64), ctypes.POINTER(ctypes.c_char_p)
    sig = {
        "tandem_engine_abi_version": (ctypes.c_uint32, []),
        "tandem_engine_version": (ctypes.c_char_p, []),
        "tandem_last_error": (ctypes.c_char_p, []),
        "tandem_engine_has_model": (i32, []),
        "tandem_model_options_default": (None, [ctypes.POINTER(ModelOptions)]),
        "tandem_model_create": (i32, [ctypes.c_char_p, ctypes.POINTER(ModelOptions), ctypes.POINTER(P)]),
        "tandem_model_destroy": (None, [P]),
        "tandem_model_vocab_size": (i64, [P]),
        "tandem_model_num_params": (i64, [P]),
        "tandem_model_num_adapter_tensors": (i64, [P]),
        "tandem_model_adapter_tensor": (i32, [P, i64, pstr, pi64, pi64, pi64]),
        "tandem_model_num_base_tensors": (i64, [P]),
        "tandem_model_base_tensor": (i32, [P, i64, pstr, ctypes.POINTER(i32), ctypes.POINTER(i64 * 4), pf64, pf64,
                                           pf64, pstr]),
        "tandem_model_set_params": (i32, [P, ctypes.POINTER(ctypes.c_float), i64]),
        "tandem_model_forward_backward": (i32, [P, ctypes.POINTER(MicroBatch), i64, i64, f64,
                                                ctypes.POINTER(ctypes.c_float), i64, pf64, pi64]),
        "tandem_model_loss": (i32, [P, ctypes.POINTER(MicroBatch), pf64, pi64]),
        "tandem_model_dropout_counter": (u64, [P]),
        "tandem_model_set_dropout_counter": (None, [P, u64]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_lib = None


def library():
    global _lib
    if _lib is None:
        path = find_library()
        _lib = _bind(ctypes.CDLL(path))
        if not _lib.tandem_engine_has_model():
            raise RuntimeError(f"{path} has no tandem_model_* calls (an older tandem)")
    return _lib


def _check(call, status):
    if status != OK:
        raise EngineError(call, status, library().tandem_last_error().decode("utf-8", "replace"))


def c_micro_batch(batch, seq, ids, supervised, lengths):
    """A tandem_micro_batch over freshly made C arrays (kept alive by the returned object)."""
    n = batch * seq
    a_ids = (ctypes.c_int32 * n)(*ids)
    a_sup = (ctypes.c_int32 * n)(*supervised)
    a_len = (ctypes.c_int32 * batch)(*lengths)
    mb = MicroBatch(batch, seq, a_ids, a_sup, a_len)
    mb._keep = (a_ids, a_sup, a_len)
    return mb


class AdapterTensor:
    def __init__(self, name, rows, cols, offset):
        self.name, self.shape, self.offset = name, [rows, cols], offset
        self.count = rows * cols


class Model:
    """A frozen base + LoRA model computed by the engine; the adapter parameters are the caller's."""

    def __init__(self, base_dir, rank, alpha, use_rslora, dropout, targets, dropout_mode, threads, seed):
        lib = library()
        o = ModelOptions()
        lib.tandem_model_options_default(ctypes.byref(o))
        o.rank, o.alpha, o.use_rslora, o.dropout = rank, alpha, 1 if use_rslora else 0, dropout
        self._targets = ",".join(targets).encode() if targets else None
        o.targets = self._targets
        o.dropout_mode, o.threads, o.seed = dropout_mode, threads, seed
        handle = ctypes.c_void_p()
        _check("tandem_model_create", lib.tandem_model_create(base_dir.encode(), ctypes.byref(o), ctypes.byref(handle)))
        self._h = handle
        self.num_params = lib.tandem_model_num_params(self._h)
        self.vocab_size = lib.tandem_model_vocab_size(self._h)
        self.adapter = []
        for i in range(lib.tandem_model_num_adapter_tensors(self._h)):
            name, rows, cols, off = ctypes.c_char_p(), ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
            _check("tandem_model_adapter_tensor", lib.tandem_model_adapter_tensor(
                self._h, i, ctypes.byref(name), ctypes.byref(rows), ctypes.byref(cols), ctypes.byref(off)))
            self.adapter.append(AdapterTensor(name.value.decode(), rows.value, cols.value, off.value))

    def close(self):
        if self._h:
            library().tandem_model_destroy(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def base_digests(self):
        """L2 digests of the base as the engine loaded it: [{name, kind, shape, sum, sumsq, maxabs, sha256}]."""
        lib, out = library(), []
        for i in range(lib.tandem_model_num_base_tensors(self._h)):
            name, ndim, shape = ctypes.c_char_p(), ctypes.c_int32(), (ctypes.c_int64 * 4)()
            s, ss, mx, sha = ctypes.c_double(), ctypes.c_double(), ctypes.c_double(), ctypes.c_char_p()
            _check("tandem_model_base_tensor", lib.tandem_model_base_tensor(
                self._h, i, ctypes.byref(name), ctypes.byref(ndim), ctypes.byref(shape), ctypes.byref(s),
                ctypes.byref(ss), ctypes.byref(mx), ctypes.byref(sha)))
            out.append({"name": name.value.decode(), "kind": "base", "shape": list(shape[:ndim.value]),
                        "sum": s.value, "sumsq": ss.value, "maxabs": mx.value, "sha256": sha.value.decode()})
        return out

    def set_params(self, params):
        """params: array('f') of num_params floats (the caller's adapter)."""
        addr, n = params.buffer_info()
        _check("tandem_model_set_params", library().tandem_model_set_params(
            self._h, ctypes.cast(addr, ctypes.POINTER(ctypes.c_float)), n))

    def forward_backward(self, mb, update, micro_index, grad_scale, grads):
        """grads (array('f') of num_params) is overwritten with grad_scale * d(loss sum)/d(params).
        Returns (loss sum, supervised labels)."""
        addr, n = grads.buffer_info()
        loss, sup = ctypes.c_double(), ctypes.c_int64()
        _check("tandem_model_forward_backward", library().tandem_model_forward_backward(
            self._h, ctypes.byref(mb), update, micro_index, grad_scale,
            ctypes.cast(addr, ctypes.POINTER(ctypes.c_float)), n, ctypes.byref(loss), ctypes.byref(sup)))
        return loss.value, sup.value

    def loss(self, mb):
        """(sum of token losses, supervised labels), dropout off."""
        loss, sup = ctypes.c_double(), ctypes.c_int64()
        _check("tandem_model_loss", library().tandem_model_loss(self._h, ctypes.byref(mb), ctypes.byref(loss),
                                                                 ctypes.byref(sup)))
        return loss.value, sup.value

    @property
    def dropout_counter(self):
        return library().tandem_model_dropout_counter(self._h)

    @dropout_counter.setter
    def dropout_counter(self, value):
        library().tandem_model_set_dropout_counter(self._h, value)


def version():
    return library().tandem_engine_version().decode()
