//! The figures in the README and the docs are what the commands beside them print today.
//!
//! Two kinds of blocks are checked, by running the command with this build's binary from the
//! repository's root and comparing what it prints:
//!
//! - in README.md and docs/**/*.md, a fenced block right after a line
//!   `<!-- output of: tidegate ARGS -->` (or `<!-- output of (optimized build): ... -->`,
//!   checked only in an optimized test build): the block is the command's output from the block's
//!   first line on, as many paragraphs (runs of lines between blank lines) as the block has,
//!   so a block may show the whole output or only its steady-state table;
//! - the pages `tidegate sim run ... --out docs/experiments/NAME` writes
//!   (docs/experiments/NAME/NAME.md): their `text` block is the command's whole output.
//!
//! Only deterministic commands belong there (the simulator's: same file and seed, same bytes).
//! `TIDEGATE_BLESS=1 cargo test -p tidegate --test doc_outputs` rewrites the marked blocks
//! with what the commands print now; the pages are rewritten, charts and all, by
//! docs/experiments/generate.sh.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers on the repository's own files"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

const MARKER: &str = "<!-- output of: ";

/// A marker for a command that takes minutes in a debug build (docs/experiments/pdc.md's
/// 600 s of 200,000 messages a second): checked, and blessed, only in an optimized test build
/// (`cargo test --release -p tidegate --test doc_outputs`).
const SLOW_MARKER: &str = "<!-- output of (optimized build): ";

/// Pages whose command takes over a minute in a debug build: checked only in an optimized
/// test build (`cargo test --release`), so that CI stays quick.
const SLOW_PAGES: &[&str] = &["cinnamon-tiers", "robustness"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The words of a shell command line: spaces split, single and double quotes group.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// What `command` (a line starting with `tidegate`) prints on stdout, run from the root.
fn output_of(command: &str) -> String {
    let words = words(command);
    assert_eq!(
        words.first().map(String::as_str),
        Some("tidegate"),
        "{command}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .args(&words[1..])
        .current_dir(root())
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The paragraphs of `output` from the line equal to `first` on, as many as `paragraphs`;
/// `None` when no line is.
fn excerpt(output: &str, first: &str, paragraphs: usize) -> Option<Vec<String>> {
    let lines: Vec<&str> = output.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim_end() == first.trim_end())?;
    let mut taken = Vec::new();
    let mut seen = 1;
    for line in &lines[start..] {
        if line.trim().is_empty() {
            if seen == paragraphs {
                break;
            }
            seen += 1;
        }
        taken.push(line.trim_end().to_owned());
    }
    while taken.last().is_some_and(|l| l.is_empty()) {
        taken.pop();
    }
    Some(taken)
}

/// A fenced block: the index of its first content line and its lines.
fn block_after(lines: &[String], fence: usize) -> (usize, Vec<String>) {
    let start = fence + 1;
    let len = lines[start..]
        .iter()
        .position(|l| l.starts_with("```"))
        .unwrap_or_else(|| panic!("a fenced block from line {} is not closed", fence + 1));
    (start, lines[start..start + len].to_vec())
}

fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut files);
    files.sort();
    files
}

#[test]
fn marked_blocks_are_what_their_commands_print() {
    let bless = std::env::var_os("TIDEGATE_BLESS").is_some();
    let mut checked = 0;
    let mut stale = Vec::new();
    for path in markdown_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let mut changed = false;
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i].trim();
            let marked = match line.strip_prefix(SLOW_MARKER) {
                Some(_) if cfg!(debug_assertions) => None,
                Some(rest) => Some(rest),
                None => line.strip_prefix(MARKER),
            };
            let Some(command) = marked
                .and_then(|rest| rest.strip_suffix("-->"))
                .map(|c| c.trim().to_owned())
            else {
                i += 1;
                continue;
            };
            let at = format!("{}:{}", path.display(), i + 1);
            assert!(
                lines.get(i + 1).is_some_and(|l| l.starts_with("```")),
                "{at}: the marker must be right above a fenced block"
            );
            let (start, block) = block_after(&lines, i + 1);
            let first = block.first().cloned().unwrap_or_default();
            let paragraphs = 1 + block.iter().filter(|l| l.trim().is_empty()).count();
            let output = output_of(&command);
            let expected = excerpt(&output, &first, paragraphs).unwrap_or_else(|| {
                panic!("{at}: `{command}` prints no line {first:?}; it prints:\n{output}")
            });
            checked += 1;
            if block != expected {
                if bless {
                    lines.splice(start..start + block.len(), expected);
                    changed = true;
                } else {
                    stale.push(format!(
                        "{at}: `{command}` now prints\n{}\n",
                        expected.join("\n")
                    ));
                }
            }
            i = start;
        }
        if changed {
            std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        }
    }
    assert!(checked >= 1, "no marked block found: the README has one");
    assert!(
        stale.is_empty(),
        "blocks that differ from their command's output (rewrite them with \
         TIDEGATE_BLESS=1 cargo test -p tidegate --test doc_outputs):\n{}",
        stale.join("\n")
    );
}

#[test]
fn generated_experiment_pages_are_what_sim_run_prints() {
    let dir = root().join("docs/experiments");
    let mut checked = 0;
    let mut stale = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let page = dir.join(&name).join(format!("{name}.md"));
        let Ok(text) = std::fs::read_to_string(&page) else {
            continue;
        };
        if cfg!(debug_assertions) && SLOW_PAGES.contains(&name.as_str()) {
            continue;
        }
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        // The fleet pages (`tidegate sim fleet`) name their command in a sentence and give
        // markdown tables: regenerated by generate.sh, not checked here.
        let Some(sh) = lines.iter().position(|l| l == "```sh") else {
            continue;
        };
        let command = &lines[sh + 1];
        // A sweep's page opens with the first of the tables its command prints.
        let sweep = command.starts_with("tidegate sim sweep");
        assert!(
            command.starts_with("tidegate sim run ") || sweep,
            "{}: {command}",
            page.display()
        );
        // The same run without writing the page over.
        let command = command
            .split(" --out ")
            .next()
            .unwrap_or(command)
            .to_owned();
        let text_fence = lines.iter().position(|l| l == "```text").unwrap();
        let (_, block) = block_after(&lines, text_fence);
        let output: Vec<String> = output_of(&command)
            .lines()
            .map(|l| l.trim_end().to_owned())
            .collect();
        checked += 1;
        let same = if sweep {
            output.get(..block.len()) == Some(&block[..])
        } else {
            block == output
        };
        if !same {
            stale.push(format!("{} (`{command}`)", page.display()));
        }
    }
    assert!(
        checked >= 5,
        "the generated pages were not found in {dir:?}"
    );
    assert!(
        stale.is_empty(),
        "pages whose tables differ from what their command prints today (regenerate them \
         with docs/experiments/generate.sh):\n{}",
        stale.join("\n")
    );
}

#[test]
fn command_lines_split_as_a_shell_does() {
    assert_eq!(
        words(r#"tidegate sim run x.toml --arm "tidegate default" --arms 'a,b c'"#),
        [
            "tidegate",
            "sim",
            "run",
            "x.toml",
            "--arm",
            "tidegate default",
            "--arms",
            "a,b c"
        ]
    );
}

#[test]
fn an_excerpt_is_whole_paragraphs_from_its_first_line() {
    let output = "a (whole)\nx 1\n\nb (steady)\ny 2\n\nc\n";
    assert_eq!(
        excerpt(output, "b (steady)", 1).unwrap(),
        ["b (steady)", "y 2"]
    );
    assert_eq!(
        excerpt(output, "a (whole)", 2).unwrap(),
        ["a (whole)", "x 1", "", "b (steady)", "y 2"]
    );
    assert_eq!(excerpt(output, "zzz", 1), None);
}
