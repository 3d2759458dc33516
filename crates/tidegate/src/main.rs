//! The `tidegate` command line.

use clap::Parser;

/// tidegate keeps services fast when more traffic arrives than they can serve: it learns how
/// much the service can do in parallel, queues a little, and turns the rest away early, lowest
/// priority first.
#[derive(Debug, Parser)]
#[command(name = "tidegate", version)]
struct Cli {}

fn main() {
    let Cli {} = Cli::parse();
}
