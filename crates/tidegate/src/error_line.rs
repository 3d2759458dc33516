//! The one line `tidegate` prints for an error that ends a command.

/// The error and its causes, joined by ": ", each said once. Some library errors write their
/// cause into their own message and also report it as their source (thiserror does both for a
/// field named `source` or marked `#[from]`): printed as a plain chain, "No such file or
/// directory" would come twice, a TOML error block twice. A cause whose text the line
/// already holds adds nothing, so it is left out.
pub(crate) fn error_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(text.trim()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_line;

    /// As thiserror writes `#[error("reading {path}: {source}")]` with a `source` field.
    #[derive(Debug)]
    struct Reading {
        path: String,
        source: std::io::Error,
    }

    impl std::fmt::Display for Reading {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "reading {}: {}", self.path, self.source)
        }
    }

    impl std::error::Error for Reading {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = anyhow::Error::new(Reading {
            path: "x.toml".to_owned(),
            source: inner,
        });
        assert_eq!(error_line(&error), "reading x.toml: no such file");
    }

    #[test]
    fn context_and_a_new_cause_are_all_kept() {
        let error = anyhow::anyhow!("connection refused")
            .context("sending to 127.0.0.1:1")
            .context("running the load");
        assert_eq!(
            error_line(&error),
            "running the load: sending to 127.0.0.1:1: connection refused"
        );
    }
}
