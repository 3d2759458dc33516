//! The proxy configurations the docs show are ones the proxy accepts: a key renamed or a value
//! refused later fails here, not in a user's `--check`.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a failure is the test's failure"
)]

use std::path::Path;

use tidegate_proxy::Config;

/// The fenced ```toml blocks of a page under `docs/`.
fn toml_blocks(page: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(page);
    let text = std::fs::read_to_string(&path).expect("the page is readable");
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        match open.as_mut() {
            None if line.trim_end() == "```toml" => open = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(open.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    assert!(open.is_none(), "{page}: a ```toml block is not closed");
    blocks
}

#[test]
fn the_call_chain_pages_proxy_files_pass_the_check() {
    let blocks = toml_blocks("chains.md");
    assert_eq!(
        blocks.len(),
        2,
        "the edge proxy's file and the one behind it"
    );
    for (i, block) in blocks.iter().enumerate() {
        let origin = format!("docs/chains.md, block {}", i + 1);
        let config = Config::parse(block, &origin)
            .unwrap_or_else(|e| panic!("{origin} does not parse: {e}\n{block}"));
        config
            .validate()
            .unwrap_or_else(|e| panic!("{origin} fails the check: {e}\n{block}"));
        assert_eq!(config.priority.cohorts.salt, 7, "{origin}: the shared salt");
        assert!(
            config.gate.queue.wait_bound.is_infinite(),
            "{origin}: no wait bound"
        );
    }
}
