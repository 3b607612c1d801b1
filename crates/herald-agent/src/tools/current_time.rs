use futures::FutureExt;
use futures::future::BoxFuture;

use super::{Tool, ToolContext, ToolSpec};

/// `current_time`: the date and time now, in UTC and the host's local time.
#[derive(Debug, Clone, Copy, Default)]
pub struct CurrentTime;

impl Tool for CurrentTime {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "current_time".into(),
            description: "The current date and time (UTC and the server's local time).".into(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        }
    }

    fn call<'a>(
        &'a self,
        _context: &'a ToolContext,
        _arguments: serde_json::Value,
    ) -> BoxFuture<'a, Result<String, String>> {
        let utc = chrono::Utc::now();
        let local = chrono::Local::now();
        let text = format!(
            "{} UTC ({} local, {})",
            utc.format("%Y-%m-%d %H:%M:%S"),
            local.format("%Y-%m-%d %H:%M:%S %:z"),
            local.format("%A")
        );
        async move { Ok(text) }.boxed()
    }
}
