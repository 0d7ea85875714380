//! Wake-ups for readers waiting on a run's history (`GetHistory` with a wait,
//! `WatchRun`). The writer publishes a run's last event id after each commit.

use std::collections::HashMap;
use std::sync::Mutex;

use railyard_model::RunKey;
use tokio::sync::watch;

/// Per-run channels of "the last committed event id".
#[derive(Default)]
pub struct Watchers {
    runs: Mutex<HashMap<RunKey, watch::Sender<u64>>>,
}

impl Watchers {
    /// A receiver that changes whenever the run gets new events.
    pub fn subscribe(&self, key: &RunKey) -> watch::Receiver<u64> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        // Channels of runs nobody watches any more go when the map grows.
        if runs.len() >= 1024 {
            runs.retain(|_, tx| tx.receiver_count() > 0);
        }
        runs.entry(key.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Publishes a run's new last event id.
    pub fn notify(&self, key: &RunKey, last_event_id: u64) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = runs.get(key) {
            if tx.receiver_count() == 0 {
                runs.remove(key);
            } else {
                tx.send_replace(last_event_id);
            }
        }
    }

    /// The runs someone is watching.
    pub fn watched(&self) -> Vec<RunKey> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.iter()
            .filter(|(_, tx)| tx.receiver_count() > 0)
            .map(|(key, _)| key.clone())
            .collect()
    }
}
