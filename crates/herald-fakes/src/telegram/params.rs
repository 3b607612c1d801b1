//! The parameters of a Bot API call, read the three ways Telegram accepts them: a JSON body, a
//! form body, or the query string.
//!
//! teloxide sends JSON for every method the fake serves (multipart only for file uploads), but a
//! person with curl may use either of the others, where every value is a string: the getters
//! accept `"123"` for a number and a JSON string for an object.

use serde_json::{Map, Value};

use super::faults::ApiError;

/// The parameters of one call.
#[derive(Debug, Default)]
pub(crate) struct Params(Map<String, Value>);

impl Params {
    /// Reads a JSON body; an empty one means no parameters.
    pub(crate) fn from_json(body: &[u8]) -> Result<Params, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Params::default());
        }
        match serde_json::from_slice(body) {
            Ok(Value::Object(map)) => Ok(Params(map)),
            Ok(_) => Err(ApiError::bad_request("parameters must be a JSON object")),
            Err(_) => Err(ApiError::bad_request("can't parse JSON object")),
        }
    }

    /// Parameters given as name and value strings (a form or a query string).
    pub(crate) fn from_pairs(pairs: Vec<(String, String)>) -> Params {
        let mut params = Params::default();
        params.add_missing(pairs);
        params
    }

    /// Adds the pairs whose names are not set yet (query parameters under a body).
    pub(crate) fn add_missing(&mut self, pairs: Vec<(String, String)>) {
        for (name, value) in pairs {
            self.0.entry(name).or_insert(Value::String(value));
        }
    }

    /// All parameters, as recorded.
    pub(crate) fn to_value(&self) -> Value {
        Value::Object(self.0.clone())
    }

    /// An integer parameter; a string of digits counts.
    pub(crate) fn int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64()),
            Some(Value::String(s)) if s.trim().parse::<i64>().is_ok() => Ok(s.trim().parse().ok()),
            Some(_) => Err(ApiError::bad_request(&format!("invalid {name} specified"))),
        }
    }

    /// A string parameter; a number counts as its digits.
    pub(crate) fn string(&self, name: &str) -> Option<String> {
        match self.0.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    /// An object parameter, or a JSON string holding one.
    pub(crate) fn object(&self, name: &str) -> Option<Map<String, Value>> {
        match self.0.get(name)? {
            Value::Object(map) => Some(map.clone()),
            Value::String(s) => match serde_json::from_str(s) {
                Ok(Value::Object(map)) => Some(map),
                _ => None,
            },
            _ => None,
        }
    }

    /// A list parameter, or a JSON string holding one.
    pub(crate) fn list(&self, name: &str) -> Option<Vec<Value>> {
        match self.0.get(name)? {
            Value::Array(list) => Some(list.clone()),
            Value::String(s) => serde_json::from_str(s).ok(),
            _ => None,
        }
    }

    /// The `chat_id`, which must be a number: the fake knows no `@channel` names.
    pub(crate) fn chat_id(&self) -> Result<i64, ApiError> {
        match self.int("chat_id") {
            Ok(Some(id)) => Ok(id),
            Ok(None) => Err(ApiError::bad_request("chat_id is empty")),
            Err(_) => Err(ApiError::bad_request("chat not found")),
        }
    }

    /// The message a send replies to: `reply_parameters.message_id`, else the older
    /// `reply_to_message_id`.
    pub(crate) fn reply_to(&self) -> Result<Option<i64>, ApiError> {
        if let Some(reply) = self.object("reply_parameters") {
            return Params(reply).int("message_id");
        }
        self.int("reply_to_message_id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_strings_read_like_json_values() {
        let pairs = |list: &[(&str, &str)]| {
            list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>()
        };
        let form = Params::from_pairs(pairs(&[
            ("chat_id", "-100"),
            ("reply_parameters", r#"{"message_id": 7}"#),
            ("text", "42"),
        ]));
        assert_eq!(form.chat_id(), Ok(-100));
        assert_eq!(form.reply_to(), Ok(Some(7)));
        assert_eq!(form.string("text").as_deref(), Some("42"));

        let mut json = Params::from_json(br#"{"chat_id": 5, "reply_to_message_id": 3}"#).unwrap();
        json.add_missing(pairs(&[("chat_id", "9"), ("limit", "1")]));
        assert_eq!(
            (json.chat_id(), json.reply_to(), json.int("limit")),
            (Ok(5), Ok(Some(3)), Ok(Some(1)))
        );

        assert!(Params::from_json(b"").unwrap().to_value().as_object().unwrap().is_empty());
        assert!(Params::from_json(b"[1]").is_err());
        let channel = Params::from_json(br#"{"chat_id": "@news"}"#).unwrap();
        assert_eq!(channel.chat_id().unwrap_err().description, "Bad Request: chat not found");
    }
}
