//! `tidegate completions SHELL` and `tidegate man`: what a packager installs beside the
//! binary, generated from the same clap definitions that parse the command line, so that they
//! can never name a flag the binary does not have.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Command};
use clap_complete::Shell;

/// Print a shell completion script for tidegate
///
/// Examples:
///   tidegate completions bash > /usr/share/bash-completion/completions/tidegate
///   tidegate completions zsh > "${fpath[1]}/_tidegate"
///   tidegate completions fish > ~/.config/fish/completions/tidegate.fish
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, elvish, fish, powershell or zsh.
    shell: Shell,
}

/// Print tidegate's man page (roff), or write one page per command with --out
///
/// Examples:
///   tidegate man | man -l -
///   tidegate man --out /usr/local/share/man/man1
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ManArgs {
    /// Write tidegate.1 and a page per command (tidegate-proxy.1, tidegate-sim-run.1, ...)
    /// into this directory (created if needed) instead of printing tidegate.1.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

pub(crate) fn completions(args: &CompletionsArgs, mut command: Command) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "tidegate", &mut script);
    std::io::stdout()
        .write_all(&script)
        .context("writing the completion script")
}

pub(crate) fn man(args: &ManArgs, command: Command) -> anyhow::Result<()> {
    match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("writing the man pages into {}", dir.display()))?;
            eprintln!("wrote the man pages into {}", dir.display());
            Ok(())
        }
        None => {
            let mut page = Vec::new();
            // As `generate_to` does: `help` has no page of its own to point to.
            clap_mangen::Man::new(command.disable_help_subcommand(true))
                .render(&mut page)
                .context("rendering the man page")?;
            std::io::stdout()
                .write_all(&page)
                .context("writing the man page")
        }
    }
}
