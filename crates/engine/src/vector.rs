//! The arithmetic of the vector operations (KV-Direct §2.1): a value seen as an array of
//! little-endian elements. Integer updates wrap, floats follow IEEE 754 (min and max are
//! minNum / maxNum: a NaN operand loses to a number); reductions are exact (128-bit integer
//! sums). Every function here trusts lengths checked by [`check`].

use hkv_types::{Cmp, Elem, ReduceOp, Reduced, UpdateOp, VectorCall, VectorError};

/// What a `vupdate` combines each element with.
#[derive(Clone, Copy, Debug)]
pub enum Operand<'a> {
    /// One element's bits, for every element.
    Scalar(u64),
    /// Element by element, as long as the value.
    Vector(&'a [u8]),
}

/// Whether `call` can run on a value of `value_len` bytes (with an operand vector of
/// `operand_len` bytes for `vupdatev`); nothing may change when it cannot.
pub fn check(
    elem: Elem,
    call: &VectorCall,
    value_len: usize,
    operand_len: usize,
) -> Result<(), VectorError> {
    if !value_len.is_multiple_of(elem.size()) {
        return Err(VectorError::NotMultiple);
    }
    match *call {
        VectorCall::Update { op, .. } if op.is_bitwise() && elem.is_float() => {
            Err(VectorError::Unsupported)
        }
        VectorCall::Update { scalar: None, .. } if operand_len != value_len => {
            Err(VectorError::VectorLength)
        }
        VectorCall::Reduce(op) if op.is_bitwise() && elem.is_float() => {
            Err(VectorError::Unsupported)
        }
        VectorCall::Reduce(ReduceOp::Min | ReduceOp::Max | ReduceOp::And) if value_len == 0 => {
            Err(VectorError::Empty)
        }
        _ => Ok(()),
    }
}

/// One element type's arithmetic.
trait Num: Copy + PartialOrd {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn put(self, b: &mut [u8]);
    fn from_scalar(s: u64) -> Self;
    fn apply(self, op: UpdateOp, x: Self) -> Self;
    fn reduce(op: ReduceOp, v: &[u8]) -> Reduced;
}

/// Little-endian load and store of one element, for every type alike.
macro_rules! le_io {
    ($t:ty) => {
        const SIZE: usize = std::mem::size_of::<$t>();
        #[inline(always)]
        fn load(b: &[u8]) -> Self {
            let mut a = [0u8; std::mem::size_of::<$t>()];
            a.copy_from_slice(&b[..Self::SIZE]);
            <$t>::from_le_bytes(a)
        }
        #[inline(always)]
        fn put(self, b: &mut [u8]) {
            b[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
        }
    };
}

macro_rules! int_num {
    ($t:ty, $wide:ty, $variant:ident) => {
        impl Num for $t {
            le_io!($t);
            #[inline(always)]
            fn from_scalar(s: u64) -> Self {
                // The parser checked the range; the bits are the element's own.
                s as $t
            }
            #[inline(always)]
            fn apply(self, op: UpdateOp, x: Self) -> Self {
                match op {
                    UpdateOp::Add => self.wrapping_add(x),
                    UpdateOp::Sub => self.wrapping_sub(x),
                    UpdateOp::Min => self.min(x),
                    UpdateOp::Max => self.max(x),
                    UpdateOp::And => self & x,
                    UpdateOp::Or => self | x,
                    UpdateOp::Xor => self ^ x,
                    UpdateOp::Set => x,
                }
            }
            fn reduce(op: ReduceOp, v: &[u8]) -> Reduced {
                let it = v.chunks_exact(Self::SIZE).map(Self::load);
                let wide = |x: $t| x as $wide;
                let folded: $wide = match op {
                    ReduceOp::Count => return Reduced::Unsigned((v.len() / Self::SIZE) as u128),
                    // At most 2^32 elements of at most 2^64: a 128-bit sum cannot overflow.
                    ReduceOp::Sum => it.map(wide).sum(),
                    ReduceOp::Min => it.min().map_or(0, wide),
                    ReduceOp::Max => it.max().map_or(0, wide),
                    ReduceOp::And => wide(it.fold(!0, |a, x| a & x)),
                    ReduceOp::Or => wide(it.fold(0, |a, x| a | x)),
                    ReduceOp::Xor => wide(it.fold(0, |a, x| a ^ x)),
                };
                Reduced::$variant(folded)
            }
        }
    };
}

int_num!(u8, u128, Unsigned);
int_num!(u16, u128, Unsigned);
int_num!(u32, u128, Unsigned);
int_num!(u64, u128, Unsigned);
int_num!(i8, i128, Signed);
int_num!(i16, i128, Signed);
int_num!(i32, i128, Signed);
int_num!(i64, i128, Signed);

macro_rules! float_num {
    ($t:ty, $bits:ty) => {
        impl Num for $t {
            le_io!($t);
            #[inline(always)]
            fn from_scalar(s: u64) -> Self {
                <$t>::from_bits(s as $bits)
            }
            #[inline(always)]
            fn apply(self, op: UpdateOp, x: Self) -> Self {
                match op {
                    UpdateOp::Add => self + x,
                    UpdateOp::Sub => self - x,
                    UpdateOp::Min => self.min(x),
                    UpdateOp::Max => self.max(x),
                    UpdateOp::Set => x,
                    // Refused by `check`: bitwise operations are for integers.
                    UpdateOp::And | UpdateOp::Or | UpdateOp::Xor => self,
                }
            }
            fn reduce(op: ReduceOp, v: &[u8]) -> Reduced {
                let mut it = v.chunks_exact(Self::SIZE).map(|b| f64::from(Self::load(b)));
                let r = match op {
                    ReduceOp::Count => return Reduced::Unsigned((v.len() / Self::SIZE) as u128),
                    ReduceOp::Sum => it.fold(0.0, |a, x| a + x),
                    ReduceOp::Min => it.next().map_or(0.0, |f| it.fold(f, f64::min)),
                    ReduceOp::Max => it.next().map_or(0.0, |f| it.fold(f, f64::max)),
                    // Refused by `check`.
                    ReduceOp::And | ReduceOp::Or | ReduceOp::Xor => 0.0,
                };
                Reduced::Float(r.to_bits())
            }
        }
    };
}

float_num!(f32, u32);
float_num!(f64, u64);

/// Runs `$f::<T>(args)` for the element type `$elem`.
macro_rules! dispatch {
    ($elem:expr, $f:ident($($arg:expr),*)) => {
        match $elem {
            Elem::U8 => $f::<u8>($($arg),*),
            Elem::U16 => $f::<u16>($($arg),*),
            Elem::U32 => $f::<u32>($($arg),*),
            Elem::U64 => $f::<u64>($($arg),*),
            Elem::I8 => $f::<i8>($($arg),*),
            Elem::I16 => $f::<i16>($($arg),*),
            Elem::I32 => $f::<i32>($($arg),*),
            Elem::I64 => $f::<i64>($($arg),*),
            Elem::F32 => $f::<f32>($($arg),*),
            Elem::F64 => $f::<f64>($($arg),*),
        }
    };
}

fn update_as<T: Num>(op: UpdateOp, value: &mut [u8], operand: Operand<'_>) {
    match operand {
        Operand::Scalar(s) => {
            let x = T::from_scalar(s);
            for c in value.chunks_exact_mut(T::SIZE) {
                T::load(c).apply(op, x).put(c);
            }
        }
        Operand::Vector(w) => {
            for (c, o) in value.chunks_exact_mut(T::SIZE).zip(w.chunks_exact(T::SIZE)) {
                T::load(c).apply(op, T::load(o)).put(c);
            }
        }
    }
}

fn filter_as<T: Num>(cmp: Cmp, scalar: u64, value: &[u8], out: &mut Vec<u8>) {
    let x = T::from_scalar(scalar);
    for c in value.chunks_exact(T::SIZE) {
        let e = T::load(c);
        // PartialOrd: IEEE for floats, so a NaN passes `ne` only.
        let pass = match cmp {
            Cmp::Eq => e == x,
            Cmp::Ne => e != x,
            Cmp::Lt => e < x,
            Cmp::Le => e <= x,
            Cmp::Gt => e > x,
            Cmp::Ge => e >= x,
        };
        if pass {
            out.extend_from_slice(c);
        }
    }
}

fn reduce_as<T: Num>(op: ReduceOp, value: &[u8]) -> Reduced {
    T::reduce(op, value)
}

/// Applies `op` with `operand` to every element of `value`, in place.
pub fn update(elem: Elem, op: UpdateOp, value: &mut [u8], operand: Operand<'_>) {
    dispatch!(elem, update_as(op, value, operand))
}

/// Folds the elements of `value`.
pub fn reduce(elem: Elem, op: ReduceOp, value: &[u8]) -> Reduced {
    dispatch!(elem, reduce_as(op, value))
}

/// Appends to `out` the elements of `value` that pass `cmp` against `scalar`, in order.
pub fn filter(elem: Elem, cmp: Cmp, scalar: u64, value: &[u8], out: &mut Vec<u8>) {
    dispatch!(elem, filter_as(cmp, scalar, value, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le<T: Num>(xs: &[T]) -> Vec<u8> {
        let mut v = vec![0; xs.len() * T::SIZE];
        for (c, x) in v.chunks_exact_mut(T::SIZE).zip(xs) {
            x.put(c);
        }
        v
    }

    #[test]
    fn integer_updates_wrap() {
        let mut v = le::<u8>(&[250, 1, 0]);
        update(Elem::U8, UpdateOp::Add, &mut v, Operand::Scalar(10));
        assert_eq!(v, [4, 11, 10]);
        update(Elem::U8, UpdateOp::Sub, &mut v, Operand::Scalar(11));
        assert_eq!(v, [249, 0, 255]);
        let mut v = le::<i16>(&[i16::MIN, 5]);
        update(Elem::I16, UpdateOp::Sub, &mut v, Operand::Scalar(1));
        assert_eq!(v, le::<i16>(&[i16::MAX, 4]));
    }

    #[test]
    fn element_wise_with_a_vector() {
        let mut v = le::<i32>(&[1, -2, 3]);
        let w = le::<i32>(&[10, 20, -30]);
        update(Elem::I32, UpdateOp::Max, &mut v, Operand::Vector(&w));
        assert_eq!(v, le::<i32>(&[10, 20, 3]));
    }

    #[test]
    fn sums_are_exact_past_64_bits() {
        let v = le::<u64>(&[u64::MAX, u64::MAX, 2]);
        assert_eq!(
            reduce(Elem::U64, ReduceOp::Sum, &v).to_string(),
            "36893488147419103232"
        );
        let v = le::<i64>(&[i64::MIN, i64::MIN, -1]);
        assert_eq!(
            reduce(Elem::I64, ReduceOp::Sum, &v).to_string(),
            "-18446744073709551617"
        );
    }

    #[test]
    fn bitwise_reductions_keep_the_sign_of_the_type() {
        let v = le::<i8>(&[-1, -2]);
        assert_eq!(reduce(Elem::I8, ReduceOp::And, &v).to_string(), "-2");
        let v = le::<u8>(&[0xf0, 0x0f]);
        assert_eq!(reduce(Elem::U8, ReduceOp::Or, &v).to_string(), "255");
    }

    #[test]
    fn floats_follow_ieee() {
        let v = le::<f64>(&[1.5, f64::NAN, -2.0]);
        assert_eq!(reduce(Elem::F64, ReduceOp::Sum, &v).to_string(), "NaN");
        assert_eq!(reduce(Elem::F64, ReduceOp::Min, &v).to_string(), "-2");
        let mut out = Vec::new();
        filter(Elem::F64, Cmp::Ne, 1.5f64.to_bits(), &v, &mut out);
        assert_eq!(out, le::<f64>(&[f64::NAN, -2.0]));
        let v = le::<f32>(&[0.5, 0.25]);
        assert_eq!(reduce(Elem::F32, ReduceOp::Sum, &v).to_string(), "0.75");
    }

    #[test]
    fn check_refuses_what_cannot_run() {
        let up = |op, scalar| VectorCall::Update {
            op,
            scalar,
            old: false,
        };
        assert_eq!(
            check(Elem::U32, &up(UpdateOp::Add, Some(1)), 6, 0),
            Err(VectorError::NotMultiple)
        );
        assert_eq!(
            check(Elem::U32, &up(UpdateOp::Add, None), 8, 4),
            Err(VectorError::VectorLength)
        );
        assert_eq!(
            check(Elem::F32, &up(UpdateOp::Xor, Some(1)), 8, 0),
            Err(VectorError::Unsupported)
        );
        assert_eq!(
            check(Elem::U8, &VectorCall::Reduce(ReduceOp::Min), 0, 0),
            Err(VectorError::Empty)
        );
        assert_eq!(
            check(Elem::U8, &VectorCall::Reduce(ReduceOp::Sum), 0, 0),
            Ok(())
        );
    }
}
