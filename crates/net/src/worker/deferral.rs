//! Reads the engine deferred because the pass's value budget was spent: where a client
//! resumes, and how many keys it may plan next.

use hkv_engine::{Response, Responses};

use crate::plan::{ReadMark, MAX_KEYS_PER_CONN_PASS};

/// Fewest keys a connection whose reads were deferred may plan in a pass.
const MIN_KEY_CAP: usize = 8;

/// The first read of a client that the engine deferred (the value budget was spent).
pub(super) fn first_deferred<'m>(marks: &'m [ReadMark], res: &Responses) -> Option<&'m ReadMark> {
    marks
        .iter()
        .find(|m| res.results[m.req as usize] == Response::Deferred)
}

/// The keys a connection may plan in its next pass, after a pass that planned the reads
/// `marks` and deferred `deferred`: twice what was answered before the deferral, or twice
/// the last cap after a pass that answered every read, between [`MIN_KEY_CAP`] and
/// [`MAX_KEYS_PER_CONN_PASS`]. Every key after a deferred one is planned, looked up and
/// thrown away (the client resumes at the deferred one): 500 clients that never read
/// their 5,000-key gets burned a core for minutes, ~120 keys deferred per value sent, and
/// slowed everyone else's GETs to 50 ms (a hostile probe).
pub(super) fn key_cap_after(cap: usize, marks: &[ReadMark], deferred: Option<&ReadMark>) -> usize {
    let next = match (deferred, marks.first()) {
        (Some(d), Some(first)) => 2 * (d.req - first.req) as usize,
        (None, Some(_)) => cap.saturating_mul(2),
        (_, None) => return cap,
    };
    next.clamp(MIN_KEY_CAP, MAX_KEYS_PER_CONN_PASS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(req: u32) -> ReadMark {
        ReadMark {
            req,
            step: 0,
            resume: 0,
            cont: None,
        }
    }

    #[test]
    fn the_key_cap_follows_what_the_value_budget_let_through() {
        let marks: Vec<ReadMark> = (10..266).map(mark).collect();
        // One value answered, the rest deferred: the floor.
        assert_eq!(key_cap_after(256, &marks, Some(&marks[1])), MIN_KEY_CAP);
        // 40 answered: room for twice that.
        assert_eq!(key_cap_after(256, &marks, Some(&marks[40])), 80);
        // All answered: the cap doubles back up to the most a pass takes.
        assert_eq!(key_cap_after(8, &marks, None), 16);
        assert_eq!(key_cap_after(200, &marks, None), MAX_KEYS_PER_CONN_PASS);
        // A pass without reads leaves it as it was.
        assert_eq!(key_cap_after(8, &[], None), 8);
    }
}
