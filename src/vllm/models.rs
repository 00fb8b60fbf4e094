//! Reading a `/v1/models` answer within fixed bounds.
//!
//! The answer comes from a tenant's server: ~1 MiB of `{"id":"m1"}` entries
//! parsed into a `serde_json::Value` tree costs tens of MiB and then as many
//! warnings and config entries. So the body is read by typed visitors that
//! keep at most [`MAX_MODELS_PER_PROVIDER`] models, never store an id longer
//! than [`MAX_MODEL_ID_LEN`], skip everything else without building it, and
//! count what they left out. Any JSON value where a field is expected is
//! accepted and ignored, as the tree-based reading did.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::render::config::{self, Served};

/// Models kept per provider; more would only grow the config, the cache and
/// the status without helping anyone pick a model.
pub const MAX_MODELS_PER_PROVIDER: usize = 64;
/// Longest model id kept, in bytes (Hugging Face ids are `org/name`, far shorter).
pub const MAX_MODEL_ID_LEN: usize = 256;

/// What a `/v1/models` answer listed, within the bounds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelList {
    /// The first [`MAX_MODELS_PER_PROVIDER`] distinct ids, with their clamped `max_model_len`.
    pub served: Served,
    /// Entries with an id left out because the list was full.
    pub not_listed: usize,
    /// Entries left out because their id is longer than [`MAX_MODEL_ID_LEN`].
    pub long_ids: usize,
}

/// `id` → `max_model_len` from a `/v1/models` body, bounded (see the module doc).
pub fn parse_models(body: &[u8]) -> Result<ModelList, String> {
    let Answer(data) = serde_json::from_slice(body).map_err(|e| format!("the /v1/models answer is not JSON ({e})"))?;
    data.ok_or_else(|| "the /v1/models answer has no data array".to_string())
}

/// Visitor methods for the JSON values a visitor does not want: each yields
/// `$none`, arrays and objects drained without keeping anything.
macro_rules! otherwise {
    ($none:expr; $($kind:ident)*) => { $( otherwise!(@$kind $none); )* };
    (@bool $none:expr) => { fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> { Ok($none) } };
    (@i64 $none:expr) => { fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> { Ok($none) } };
    (@u64 $none:expr) => { fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> { Ok($none) } };
    (@f64 $none:expr) => { fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> { Ok($none) } };
    (@str $none:expr) => { fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> { Ok($none) } };
    (@unit $none:expr) => { fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> { Ok($none) } };
    (@seq $none:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($none)
        }
    };
    (@map $none:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($none)
        }
    };
}

/// The whole answer: the model list when it is an object with a `data` array.
struct Answer(Option<ModelList>);

/// Keys are matched without allocating (a tenant can send megabyte-long keys).
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum AnswerKey {
    Data,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for Answer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Answer;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a /v1/models answer")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Answer, A::Error> {
                let mut data = None;
                while let Some(key) = map.next_key::<AnswerKey>()? {
                    match key {
                        // The last `data` wins, as it would in a JSON object.
                        AnswerKey::Data => data = map.next_value::<Data>()?.0,
                        AnswerKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Answer(data))
            }
            otherwise!(Answer(None); bool i64 u64 f64 str unit seq);
        }
        d.deserialize_any(V)
    }
}

/// The `data` field: the bounded list when it is an array.
struct Data(Option<ModelList>);

impl<'de> Deserialize<'de> for Data {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Data;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of models")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Data, A::Error> {
                let mut list = ModelList::default();
                while let Some(entry) = seq.next_element::<Entry>()? {
                    match entry.id {
                        Id::Missing => {}
                        Id::TooLong => list.long_ids += 1,
                        Id::Kept(id) => {
                            let len = entry.max_model_len.unwrap_or(config::DEFAULT_CONTEXT_LIMIT * 10 / 8);
                            let len = config::clamp_max_model_len(len);
                            if list.served.len() < MAX_MODELS_PER_PROVIDER || list.served.contains_key(&id) {
                                list.served.insert(id, len);
                            } else {
                                list.not_listed += 1;
                            }
                        }
                    }
                }
                Ok(Data(Some(list)))
            }
            otherwise!(Data(None); bool i64 u64 f64 str unit map);
        }
        d.deserialize_any(V)
    }
}

/// One entry of `data`; anything but an object is an entry without an id.
#[derive(Default)]
struct Entry {
    id: Id,
    max_model_len: Option<i64>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum EntryKey {
    Id,
    MaxModelLen,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a model")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                let mut entry = Entry::default();
                while let Some(key) = map.next_key::<EntryKey>()? {
                    match key {
                        EntryKey::Id => entry.id = map.next_value()?,
                        EntryKey::MaxModelLen => entry.max_model_len = map.next_value::<Len>()?.0,
                        EntryKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(entry)
            }
            otherwise!(Entry::default(); bool i64 u64 f64 str unit seq);
        }
        d.deserialize_any(V)
    }
}

/// A model id: kept only when it is a string of at most [`MAX_MODEL_ID_LEN`] bytes.
#[derive(Default)]
enum Id {
    #[default]
    Missing,
    TooLong,
    Kept(String),
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a model id")
            }
            // The length is checked before anything is copied.
            fn visit_str<E: de::Error>(self, id: &str) -> Result<Id, E> {
                Ok(if id.len() > MAX_MODEL_ID_LEN { Id::TooLong } else { Id::Kept(id.to_string()) })
            }
            otherwise!(Id::Missing; bool i64 u64 f64 unit seq map);
        }
        d.deserialize_any(V)
    }
}

/// `max_model_len`: an integer that fits in i64, else none (the default applies).
struct Len(Option<i64>);

impl<'de> Deserialize<'de> for Len {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Len;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Len, E> {
                Ok(Len(Some(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Len, E> {
                Ok(Len(i64::try_from(v).ok()))
            }
            otherwise!(Len(None); bool f64 str unit seq map);
        }
        d.deserialize_any(V)
    }
}
