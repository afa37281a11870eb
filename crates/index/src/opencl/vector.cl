// KV-Direct's vector update (hkv issue 19) on the device: one work-item per element of a
// value copied into `v`. The operand is the scalar's bits (`vec == 0`) or the vector `w`.
// Ops: 0 add, 1 sub, 2 min, 3 max, 4 and, 5 or, 6 xor, 7 set. Integer add and sub wrap
// (computed unsigned, where wrapping is defined); float min and max are fmin and fmax,
// IEEE minNum and maxNum, as on the CPU.

#define INT_UPDATE(NAME, T, UT, AS)                                                      \
kernel void vupdate_##NAME(global T* v, global const T* w, ulong scalar, uint op,        \
                           uint vec, uint n) {                                           \
    uint i = get_global_id(0);                                                           \
    if (i >= n) return;                                                                  \
    T a = v[i];                                                                          \
    T x = vec ? w[i] : AS((UT)scalar);                                                   \
    T r;                                                                                 \
    switch (op) {                                                                        \
    case 0: r = AS((UT)((UT)a + (UT)x)); break;                                          \
    case 1: r = AS((UT)((UT)a - (UT)x)); break;                                          \
    case 2: r = min(a, x); break;                                                        \
    case 3: r = max(a, x); break;                                                        \
    case 4: r = a & x; break;                                                            \
    case 5: r = a | x; break;                                                            \
    case 6: r = a ^ x; break;                                                            \
    default: r = x; break;                                                               \
    }                                                                                    \
    v[i] = r;                                                                            \
}

INT_UPDATE(u8, uchar, uchar, as_uchar)
INT_UPDATE(u16, ushort, ushort, as_ushort)
INT_UPDATE(u32, uint, uint, as_uint)
INT_UPDATE(u64, ulong, ulong, as_ulong)
INT_UPDATE(i8, char, uchar, as_char)
INT_UPDATE(i16, short, ushort, as_short)
INT_UPDATE(i32, int, uint, as_int)
INT_UPDATE(i64, long, ulong, as_long)

#define FLOAT_UPDATE(NAME, T, BITS, AS)                                                  \
kernel void vupdate_##NAME(global T* v, global const T* w, ulong scalar, uint op,        \
                           uint vec, uint n) {                                           \
    uint i = get_global_id(0);                                                           \
    if (i >= n) return;                                                                  \
    T a = v[i];                                                                          \
    T x = vec ? w[i] : AS((BITS)scalar);                                                 \
    T r;                                                                                 \
    switch (op) {                                                                        \
    case 0: r = a + x; break;                                                            \
    case 1: r = a - x; break;                                                            \
    case 2: r = fmin(a, x); break;                                                       \
    case 3: r = fmax(a, x); break;                                                       \
    default: r = x; break;                                                               \
    }                                                                                    \
    v[i] = r;                                                                            \
}

FLOAT_UPDATE(f32, float, uint, as_float)

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
FLOAT_UPDATE(f64, double, ulong, as_double)
#endif
