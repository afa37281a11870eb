//! The meta commands (mg, ms, md, ma, mn, me): parsing is in `text` (they share its line
//! format), planning in `plan.rs`, replies in `compose.rs`.

mod compose;
mod plan;

pub use compose::compose;
pub use plan::plan_meta;
