//! KVCG's hot path on a worker (docs/hotcold.md): while the batch window runs, reads of hot
//! keys at the head of a connection's input are answered at once.

use std::sync::atomic::Ordering;

use super::Worker;

impl Worker {
    /// The router holds some keys hot.
    pub(super) fn hot_path_on(&self) -> bool {
        self.shared
            .config
            .hot
            .as_ref()
            .is_some_and(|r| r.current().bins > 0)
    }

    /// The hot path (docs/hotcold.md): reads every ready connection and answers, from each,
    /// the run of reads of hot keys its unanswered input starts with, as one engine batch
    /// run at once; everything from a connection's first other request on waits for the
    /// batch. A connection's replies therefore stay in its request order.
    pub(super) fn express(&mut self, ready: &[usize]) {
        let Some(router) = self.shared.config.hot.clone() else {
            return;
        };
        // A connection listed twice (a receive and a send completed) must be planned once,
        // or the reads at its head would be answered twice.
        let mut unique = ready.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let ready = &unique[..];
        let hot = router.current();
        if hot.bins == 0 {
            return;
        }
        let read_cap = self.read_cap();
        let limit = self.shared.config.conn_buffer_limit;
        let high_water = self.shared.config.output_high_water;
        let mut any = false;
        for &t in ready {
            let over = self.shared.stats.conn_buffer_bytes.load(Ordering::Relaxed) > limit;
            if let Some(c) = self.conns.get(t) {
                if over || c.pending_output() >= high_water || c.close_after_write {
                    continue;
                }
            }
            self.receive(t, read_cap);
            if let Some(c) = self.conns.get_mut(t) {
                c.account(&self.shared.stats.conn_buffer_bytes);
                any |= c.unparsed() > 0;
            }
        }
        if !any {
            return;
        }
        let answered = self.process_with(ready, Some(&hot));
        if answered == 0 {
            return;
        }
        router.hot_gets.fetch_add(answered, Ordering::Relaxed);
        router.express_passes.fetch_add(1, Ordering::Relaxed);
        for &t in ready {
            self.send_or_drop(t);
        }
    }
}
