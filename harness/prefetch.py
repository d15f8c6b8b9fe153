"""Software prefetches for compiled kernels: ask the processor to start
loading memory that a kernel will read soon, so that the loads of several
random rows overlap instead of waiting one after the other.

A round reads k rows at random positions of the data (gigabytes at n = 1e7,
a memory map) and of arrays of n entries (the tree's leaves, the averaged
action): every such read misses the caches. Issued together as soon as the
rows are known, the misses proceed in parallel (``prefetch_rows``). A
prefetch never faults and changes no value: it is a hint (LLVM's
``llvm.prefetch``, read, high locality, data cache).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

#: bytes per cache line
LINE = 64


def _call_prefetch(builder, ptr) -> None:
    i32 = ir.IntType(32)
    ptr = builder.bitcast(ptr, ir.IntType(8).as_pointer())  # one declaration for every dtype
    fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
    # named for the running LLVM by llvmlite (typed or opaque pointers)
    fn = builder.module.declare_intrinsic("llvm.prefetch", [ptr.type], fnty)
    builder.call(fn, [ptr, i32(0), i32(3), i32(1)])


@intrinsic
def prefetch(typingctx, arr, index):
    """Prefetch the cache line holding ``arr[index]`` of a 1-D array."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(index, types.Integer)):
        return None
    sig = types.void(arr, index)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]],
                                       wraparound=False)
        _call_prefetch(builder, ptr)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch_at(typingctx, arr, row, col):
    """Prefetch the cache line holding ``arr[row, col]`` of a 2-D array."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and isinstance(row, types.Integer)
            and isinstance(col, types.Integer)):
        return None
    sig = types.void(arr, row, col)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], args[2]],
                                       wraparound=False)
        _call_prefetch(builder, ptr)
        return context.get_dummy_value()

    return sig, codegen


def prefetch_rows(X, rows):  # pragma: no cover - compiled (the overload below)
    """Prefetch every cache line of the rows ``X[rows]`` of a C-ordered 2-D
    array (the first and the last entry of each row and one every ``LINE``
    bytes between); nothing for data of any other type."""


@overload(prefetch_rows, inline="always")
def _prefetch_rows(X, rows):
    if not (isinstance(X, types.Array) and X.ndim == 2 and X.layout == "C"):
        return lambda X, rows: None
    step = max(1, (8 * LINE) // X.dtype.bitwidth)  # entries per cache line

    def impl(X, rows):  # pragma: no cover - compiled
        d = X.shape[1]
        if d == 0:
            return
        for j in range(rows.size):
            i = rows[j]
            for c in range(0, d, step):
                prefetch_at(X, i, c)
            prefetch_at(X, i, d - 1)

    return impl


def prefetch_entries(a, rows):  # pragma: no cover - compiled (the overload below)
    """Prefetch ``a[rows]`` of a 1-D array; nothing for any other type."""


@overload(prefetch_entries, inline="always")
def _prefetch_entries(a, rows):
    if not (isinstance(a, types.Array) and a.ndim == 1):
        return lambda a, rows: None

    def impl(a, rows):  # pragma: no cover - compiled
        for j in range(rows.size):
            prefetch(a, rows[j])

    return impl
