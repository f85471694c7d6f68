//! What `audit export` makes of the lines a node streams, chunk by chunk: the rows so far,
//! and whether the stream ended as a complete export does (its end line, counting the rows
//! that came) or was cut (no end line, an error line, a line after the end).
//!
//! Row lines are counted by their opening without parsing them: they are nearly all of an
//! export, and the receiver checks them, not this command.

use anyhow::{bail, Context as _};
use serde::Deserialize;
use serde_json::Value;

/// The opening of a row line, as the node writes it.
const ROW_OPENING: &[u8] = b"{\"row\":";

/// The lines received so far.
#[derive(Debug, Default)]
pub struct Receiver {
    /// The last line's bytes while its newline has not come.
    pending: Vec<u8>,
    /// The checkpoint line's `checkpoint`, once it came.
    checkpoint: Option<Checkpoint>,
    rows: u64,
    end: Option<End>,
}

/// The checkpoint an export is proven against.
#[derive(Debug, Clone, Deserialize)]
pub struct Checkpoint {
    /// Its origin (the log).
    pub origin: String,
    /// Its tree size.
    pub size: u64,
}

/// The end line's body.
#[derive(Debug, Clone, Deserialize)]
pub struct End {
    /// Rows the node sent.
    pub rows: u64,
    /// Where to go on (`--after`), if more may follow.
    pub next: Option<u64>,
    /// `complete`, `checkpoint` or `limit`.
    pub reason: String,
}

/// A complete export: its checkpoint and its end.
#[derive(Debug, Clone)]
pub struct Ended {
    /// What the rows are proven against.
    pub checkpoint: Checkpoint,
    /// How the node ended it.
    pub end: End,
}

impl Receiver {
    /// Rows received so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Take a chunk of the stream.
    pub fn feed(&mut self, chunk: &[u8]) -> anyhow::Result<()> {
        let mut rest = chunk;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(at);
            rest = &tail[1..];
            if self.pending.is_empty() {
                self.line(head)?;
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(head);
                self.line(&line)?;
            }
        }
        self.pending.extend_from_slice(rest);
        Ok(())
    }

    fn line(&mut self, line: &[u8]) -> anyhow::Result<()> {
        if self.end.is_some() {
            bail!("the node sent a line after the export's end line");
        }
        if self.checkpoint.is_some() && line.starts_with(ROW_OPENING) {
            self.rows += 1;
            return Ok(());
        }
        let line: Value = serde_json::from_slice(line).with_context(|| {
            format!(
                "the export was cut after {} rows: a line is not JSON",
                self.rows
            )
        })?;
        if self.checkpoint.is_none() {
            let checkpoint = line
                .get("checkpoint")
                .and_then(|c| Checkpoint::deserialize(c).ok())
                .context("not an export: its first line names no checkpoint")?;
            self.checkpoint = Some(checkpoint);
        } else if line.get("row").is_some() {
            self.rows += 1;
        } else if let Some(end) = line.get("end") {
            self.end = Some(End::deserialize(end).context("an end line not understood")?);
        } else if let Some(error) = line.get("error") {
            let message = error["message"].as_str().unwrap_or("no message");
            let resume = match line["next"].as_u64() {
                Some(next) => format!("; go on with --after {next}"),
                None => String::new(),
            };
            bail!(
                "the node failed the export after {} rows: {message}{resume}",
                self.rows
            );
        } else {
            bail!("the node sent a line that is not part of an export");
        }
        Ok(())
    }

    /// How the stream ended, once it has: an error unless it ended with its end line.
    pub fn finish(self) -> anyhow::Result<Ended> {
        let rows = self.rows;
        let (Some(checkpoint), Some(end)) = (self.checkpoint, self.end) else {
            bail!("the export was cut after {rows} rows: the stream ended without its end line");
        };
        if !self.pending.is_empty() {
            bail!("the node sent part of a line after the export's end line");
        }
        if end.rows != rows {
            bail!("the end line counts {} rows, but {rows} came", end.rows);
        }
        Ok(Ended { checkpoint, end })
    }
}

impl Ended {
    /// One line for the operator: what came, against what, and how to go on.
    pub fn summary(&self) -> String {
        let (c, end) = (&self.checkpoint, &self.end);
        let done = format!(
            "exported {} rows, proven against the checkpoint of {} at size {}",
            end.rows, c.origin, c.size
        );
        match (end.reason.as_str(), end.next) {
            ("checkpoint", Some(next)) => format!(
                "{done}; rows after seq {next} need a newer checkpoint: go on with --after {next} \
                 once one is signed"
            ),
            (_, Some(next)) => format!("{done}; --limit reached: go on with --after {next}"),
            (_, None) => done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "{\"checkpoint\":{\"origin\":\"o\",\"size\":4,\"root\":\"r\",\"checkpoint\":\"c\"},\"first\":1}\n";
    const ROW: &str = "{\"row\":{\"seq\":1},\"leaf_input\":\"x\",\"index\":0,\"proof\":[]}\n";

    fn fed(chunks: &[&str]) -> anyhow::Result<Receiver> {
        let mut r = Receiver::default();
        for chunk in chunks {
            r.feed(chunk.as_bytes())?;
        }
        Ok(r)
    }

    #[test]
    fn a_complete_export_in_any_chunks() {
        let whole = format!(
            "{HEAD}{ROW}{ROW}{}\n",
            r#"{"end":{"rows":2,"next":null,"reason":"complete"}}"#
        );
        for cut in 0..whole.len() {
            let (a, b) = whole.split_at(cut);
            let ended = fed(&[a, b]).unwrap().finish().unwrap();
            assert_eq!((ended.end.rows, ended.checkpoint.size), (2, 4));
        }
    }

    #[test]
    fn a_stream_without_its_end_line_is_cut() {
        let e = fed(&[HEAD, ROW, "{\"row\":"])
            .unwrap()
            .finish()
            .unwrap_err();
        assert!(e.to_string().contains("cut after 1 rows"), "{e}");
        let e = fed(&[HEAD]).unwrap().finish().unwrap_err();
        assert!(e.to_string().contains("without its end line"), "{e}");
    }

    #[test]
    fn an_error_line_fails_with_the_nodes_message_and_where_to_go_on() {
        let error = r#"{"error":{"error":"not_found","message":"row 3 was pruned"},"next":2}"#;
        let e = fed(&[HEAD, ROW, error, "\n"]).unwrap_err().to_string();
        assert!(
            e.contains("row 3 was pruned") && e.contains("--after 2"),
            "{e}"
        );
    }

    #[test]
    fn an_end_that_counts_other_rows_or_lines_after_it_fail() {
        let end = "{\"end\":{\"rows\":3,\"next\":null,\"reason\":\"complete\"}}\n";
        assert!(fed(&[HEAD, ROW, end]).unwrap().finish().is_err());
        let end = "{\"end\":{\"rows\":1,\"next\":null,\"reason\":\"complete\"}}\n";
        assert!(fed(&[HEAD, ROW, end, ROW]).is_err());
        assert!(
            fed(&["{\"rows\":[]}\n"]).is_err(),
            "a JSON page is no export"
        );
    }
}
