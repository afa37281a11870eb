//! Test knob for the linearizability checker's self-test: `HKV_FAULT_SKIP_FORWARDING=1`
//! breaks the same-key table's data forwarding on purpose (reads skip waiting writes and see
//! the index's older version), so scripts can show the checker catches a broken build. It
//! also turns in-place overwrites off: they never enter the table, and a build whose writes
//! mostly bypass what is broken would pass the check for the wrong reason.

use std::sync::OnceLock;

pub(crate) fn skip_forwarding() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("HKV_FAULT_SKIP_FORWARDING").is_some_and(|v| v == "1"))
}
