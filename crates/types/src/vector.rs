//! KV-Direct's vector operations (issue 19): a value read as an array of fixed-width
//! little-endian elements, changed, reduced or filtered where it lives.

/// The type of every element of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F32,
    F64,
}

impl Elem {
    pub const ALL: [Elem; 10] = [
        Elem::U8,
        Elem::U16,
        Elem::U32,
        Elem::U64,
        Elem::I8,
        Elem::I16,
        Elem::I32,
        Elem::I64,
        Elem::F32,
        Elem::F64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::U8 | Elem::I8 => 1,
            Elem::U16 | Elem::I16 => 2,
            Elem::U32 | Elem::I32 | Elem::F32 => 4,
            Elem::U64 | Elem::I64 | Elem::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Elem::F32 | Elem::F64)
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Elem::I8 | Elem::I16 | Elem::I32 | Elem::I64)
    }

    /// The protocol's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Elem::U8 => "u8",
            Elem::U16 => "u16",
            Elem::U32 => "u32",
            Elem::U64 => "u64",
            Elem::I8 => "i8",
            Elem::I16 => "i16",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
            Elem::F32 => "f32",
            Elem::F64 => "f64",
        }
    }

    pub fn from_name(name: &[u8]) -> Option<Elem> {
        Elem::ALL.into_iter().find(|e| e.name().as_bytes() == name)
    }
}

/// What `vupdate` / `vupdatev` do to each element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpdateOp {
    Add,
    Sub,
    Min,
    Max,
    And,
    Or,
    Xor,
    Set,
}

impl UpdateOp {
    pub const ALL: [UpdateOp; 8] = [
        UpdateOp::Add,
        UpdateOp::Sub,
        UpdateOp::Min,
        UpdateOp::Max,
        UpdateOp::And,
        UpdateOp::Or,
        UpdateOp::Xor,
        UpdateOp::Set,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UpdateOp::Add => "add",
            UpdateOp::Sub => "sub",
            UpdateOp::Min => "min",
            UpdateOp::Max => "max",
            UpdateOp::And => "and",
            UpdateOp::Or => "or",
            UpdateOp::Xor => "xor",
            UpdateOp::Set => "set",
        }
    }

    pub fn from_name(name: &[u8]) -> Option<UpdateOp> {
        UpdateOp::ALL
            .into_iter()
            .find(|o| o.name().as_bytes() == name)
    }

    /// Bitwise: defined on integer elements only.
    pub fn is_bitwise(self) -> bool {
        matches!(self, UpdateOp::And | UpdateOp::Or | UpdateOp::Xor)
    }
}

/// What `vreduce` folds the elements into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Min,
    Max,
    And,
    Or,
    Xor,
    Count,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 7] = [
        ReduceOp::Sum,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::And,
        ReduceOp::Or,
        ReduceOp::Xor,
        ReduceOp::Count,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::And => "and",
            ReduceOp::Or => "or",
            ReduceOp::Xor => "xor",
            ReduceOp::Count => "count",
        }
    }

    pub fn from_name(name: &[u8]) -> Option<ReduceOp> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name().as_bytes() == name)
    }

    pub fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::And | ReduceOp::Or | ReduceOp::Xor)
    }
}

/// The test `vfilter` keeps elements by (element `cmp` scalar).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    pub const ALL: [Cmp; 6] = [Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge];

    pub fn name(self) -> &'static str {
        match self {
            Cmp::Eq => "eq",
            Cmp::Ne => "ne",
            Cmp::Lt => "lt",
            Cmp::Le => "le",
            Cmp::Gt => "gt",
            Cmp::Ge => "ge",
        }
    }

    pub fn from_name(name: &[u8]) -> Option<Cmp> {
        Cmp::ALL.into_iter().find(|o| o.name().as_bytes() == name)
    }
}

/// One element's value as its little-endian bits, zero-extended to 64 (an `i8` of -1 is
/// `0xff`, an `f32` its IEEE bits): checked against the type once, when parsed.
pub type Scalar = u64;

/// A vector operation, carried by [`Request::vector`](crate::Request::vector).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorCall {
    /// `vupdate` (`scalar: Some`) or `vupdatev` (`None`: the operand is the request's value,
    /// element by element). `old`: answer the value as it was before.
    Update {
        op: UpdateOp,
        scalar: Option<Scalar>,
        old: bool,
    },
    Reduce(ReduceOp),
    Filter {
        cmp: Cmp,
        scalar: Scalar,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vector {
    pub elem: Elem,
    pub call: VectorCall,
}

/// The result of `vreduce`, exact: integer sums are 128-bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduced {
    Unsigned(u128),
    Signed(i128),
    /// An f64's bits (so the response stays `Eq`).
    Float(u64),
}

impl std::fmt::Display for Reduced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Reduced::Unsigned(v) => write!(f, "{v}"),
            Reduced::Signed(v) => write!(f, "{v}"),
            Reduced::Float(bits) => write!(f, "{}", f64::from_bits(bits)),
        }
    }
}

/// Why a vector operation could not run on the value it found (nothing was changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorError {
    /// The value's length is not a multiple of the element size.
    NotMultiple,
    /// `vupdatev`: the operand is not as long as the value.
    VectorLength,
    /// `vreduce min|max|and` of a value with no elements.
    Empty,
    /// A bitwise operation on a float type (the text parser refuses these first).
    Unsupported,
}
