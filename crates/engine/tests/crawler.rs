//! `lru_crawler crawl`'s refusals come in memcached's order: a disabled crawler, then a
//! crawl still running, then a list naming no class.

use hkv_engine::{CrawlError, Engine, EngineConfig};

const NOW: u32 = 1_700_000_000;

fn engine() -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 16 << 20,
        partitions: 1,
        page_size: 64 << 10,
        ..EngineConfig::default()
    })
    .unwrap()
}

#[test]
fn crawl_refusals_come_disabled_then_busy_then_an_empty_list() {
    let e = engine();
    let none: &[usize] = &[];
    assert!(e.set_crawler(false));
    assert_eq!(e.crawl(Some(none), NOW), Err(CrawlError::Disabled));
    assert_eq!(e.crawl_refusal(), Some(CrawlError::Disabled));
    assert!(e.set_crawler(true));
    assert_eq!(e.crawl_refusal(), None);
    assert_eq!(e.crawl(Some(none), NOW), Err(CrawlError::NotStarted));
    // No thread runs the crawl here, so it stays asked for.
    assert_eq!(e.crawl(Some(&[0]), NOW), Ok(()));
    assert!(e.crawling());
    assert_eq!(e.crawl(Some(none), NOW), Err(CrawlError::Busy));
    assert_eq!(e.crawl(None, NOW), Err(CrawlError::Busy));
    assert_eq!(e.crawl_refusal(), Some(CrawlError::Busy));
}
