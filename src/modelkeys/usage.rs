//! Reading the tokens a model request used from its response, as the bytes
//! pass by (pure): the `usage` object of an OpenAI-compatible answer, in a
//! JSON body or in a server-sent event (the last one with usage counts, so
//! servers that repeat a running total in every chunk are read right).
//! Nothing is held beyond a bounded window: a body or an event line longer
//! than that is passed on unread.

use serde_json::Value;

/// Largest JSON body read for its usage (its bytes still all pass on).
pub const MAX_JSON_BYTES: usize = 4 << 20;
/// Largest server-sent event line read for its usage.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Tokens a response reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt: u64,
    pub completion: u64,
}

impl Usage {
    /// `usage.prompt_tokens` and `usage.completion_tokens` of one answer or event.
    fn of(doc: &Value) -> Option<Usage> {
        let usage = doc.get("usage")?;
        let count = |field: &str| usage.get(field).and_then(Value::as_u64);
        let (prompt, completion) = (count("prompt_tokens"), count("completion_tokens"));
        (prompt.is_some() || completion.is_some())
            .then(|| Usage { prompt: prompt.unwrap_or(0), completion: completion.unwrap_or(0) })
    }
}

/// How a response's body is read.
#[derive(Debug)]
enum Reading {
    /// A JSON answer, collected up to [`MAX_JSON_BYTES`] (None past that).
    Json(Option<Vec<u8>>),
    /// Server-sent events: the unfinished line (None while one too long is skipped).
    Events { line: Option<Vec<u8>>, last: Option<Usage> },
    /// Anything else (or compressed): not read.
    Opaque,
}

/// Follows one response body chunk by chunk.
#[derive(Debug)]
pub struct Scanner(Reading);

impl Scanner {
    /// For a response with this Content-Type and Content-Encoding.
    pub fn new(content_type: &str, content_encoding: Option<&str>) -> Self {
        let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        let plain = content_encoding.is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
        Scanner(match media.as_str() {
            _ if !plain => Reading::Opaque,
            "application/json" => Reading::Json(Some(Vec::new())),
            "text/event-stream" => Reading::Events { line: Some(Vec::new()), last: None },
            _ => Reading::Opaque,
        })
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        match &mut self.0 {
            Reading::Json(body) => {
                if body.as_ref().is_some_and(|b| b.len() + chunk.len() > MAX_JSON_BYTES) {
                    *body = None;
                }
                if let Some(b) = body {
                    b.extend_from_slice(chunk);
                }
            }
            Reading::Events { line, last } => {
                let mut rest = chunk;
                while let Some(end) = rest.iter().position(|&b| b == b'\n') {
                    if let Some(l) = line.as_mut().filter(|l| l.len() + end <= MAX_LINE_BYTES) {
                        l.extend_from_slice(&rest[..end]);
                        if let Some(u) = event_usage(l) {
                            *last = Some(u);
                        }
                    }
                    *line = Some(Vec::new());
                    rest = &rest[end + 1..];
                }
                if line.as_ref().is_some_and(|l| l.len() + rest.len() > MAX_LINE_BYTES) {
                    *line = None;
                }
                if let Some(l) = line {
                    l.extend_from_slice(rest);
                }
            }
            Reading::Opaque => {}
        }
    }

    /// The usage the whole body reported, once it ended.
    pub fn finish(self) -> Option<Usage> {
        match self.0 {
            Reading::Json(body) => serde_json::from_slice(&body?).ok().as_ref().and_then(Usage::of),
            Reading::Events { line, last } => line.as_deref().and_then(event_usage).or(last),
            Reading::Opaque => None,
        }
    }
}

/// The usage in one event line (`data: {...}`), if it has one.
fn event_usage(line: &[u8]) -> Option<Usage> {
    let data = line.strip_prefix(b"data:")?;
    let data = data.strip_suffix(b"\r").unwrap_or(data);
    // Most chunks carry no usage (or `"usage":null` in each): no parse for them.
    if !has_usage_object(data) {
        return None;
    }
    serde_json::from_slice::<Value>(data).ok().as_ref().and_then(Usage::of)
}

/// Whether `"usage"` is followed by an object (`"usage": {`) somewhere.
fn has_usage_object(data: &[u8]) -> bool {
    const KEY: &[u8] = b"\"usage\"";
    let mut at = 0;
    while let Some(i) = data[at..].windows(KEY.len()).position(|w| w == KEY) {
        let after = data[at + i + KEY.len()..].iter().skip_while(|b| b.is_ascii_whitespace());
        let mut after = after.skip_while(|b| **b == b':').skip_while(|b| b.is_ascii_whitespace());
        if after.next() == Some(&b'{') {
            return true;
        }
        at += i + KEY.len();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(content_type: &str, chunks: &[&[u8]]) -> Option<Usage> {
        let mut s = Scanner::new(content_type, None);
        for c in chunks {
            s.feed(c);
        }
        s.finish()
    }

    #[test]
    fn a_json_answer_in_pieces() {
        let body = br#"{"id":"x","usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}"#;
        let (a, b) = body.split_at(20);
        assert_eq!(scan("application/json; charset=utf-8", &[a, b]), Some(Usage { prompt: 12, completion: 30 }));
        assert_eq!(scan("application/json", &[br#"{"data":[]}"#]), None);
        assert_eq!(scan("application/json", &[b"not json"]), None);
    }

    #[test]
    fn events_split_anywhere_and_the_last_usage_counts() {
        let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}\n\ndata: [DONE]\n\n";
        for cut in [1, 7, 50, 51, 90, stream.len() - 3] {
            let (a, b) = stream.split_at(cut);
            assert_eq!(scan("text/event-stream", &[a, b]), Some(Usage { prompt: 5, completion: 9 }), "cut at {cut}");
        }
        // The last line without its newline still counts.
        assert_eq!(
            scan("text/event-stream", &[b"data: {\"usage\":{\"prompt_tokens\":3}}"]),
            Some(Usage { prompt: 3, completion: 0 })
        );
    }

    #[test]
    fn null_usage_in_every_chunk_is_skipped() {
        let stream = b"data: {\"choices\":[],\"usage\":null}\n\ndata: {\"usage\": {\"prompt_tokens\":2,\"completion_tokens\":3}}\n\n";
        assert_eq!(scan("text/event-stream", &[stream]), Some(Usage { prompt: 2, completion: 3 }));
        assert!(!has_usage_object(b"{\"usage\":null}") && has_usage_object(b"{\"usage\" : {}}"));
        // A line complete within one chunk is bounded too.
        let mut long = b"data: {\"usage\":{\"prompt_tokens\":9},\"pad\":\"".to_vec();
        long.extend(vec![b'a'; MAX_LINE_BYTES]);
        long.extend_from_slice(b"\"}\n");
        assert_eq!(scan("text/event-stream", &[&long]), None);
    }

    #[test]
    fn oversized_bodies_and_lines_pass_unread() {
        let mut s = Scanner::new("application/json", None);
        s.feed(br#"{"usage":{"prompt_tokens":1,"completion_tokens":1},"pad":""#);
        s.feed(&vec![b'a'; MAX_JSON_BYTES]);
        s.feed(br#""}"#);
        assert_eq!(s.finish(), None);

        let mut s = Scanner::new("text/event-stream", None);
        s.feed(b"data: {\"pad\":\"");
        s.feed(&vec![b'a'; MAX_LINE_BYTES]);
        s.feed(b"\",\"usage\":{\"prompt_tokens\":7}}\n");
        // The next line is read again.
        s.feed(b"data: {\"usage\":{\"completion_tokens\":2}}\n");
        assert_eq!(s.finish(), Some(Usage { prompt: 0, completion: 2 }));
    }

    #[test]
    fn compressed_or_other_bodies_are_not_read() {
        let body: &[u8] = br#"{"usage":{"prompt_tokens":1}}"#;
        let mut s = Scanner::new("application/json", Some("gzip"));
        s.feed(body);
        assert_eq!(s.finish(), None);
        assert_eq!(scan("text/plain", &[body]), None);
        let mut s = Scanner::new("application/json", Some("identity"));
        s.feed(body);
        assert_eq!(s.finish(), Some(Usage { prompt: 1, completion: 0 }));
    }
}
