//! The console's gRPC calls, counted against each page's budget.
//!
//! Every page states the most gRPC calls it may make ([`Budget`]); each call goes
//! through an [`Api`], which refuses a call past the budget (a bug in the page, shown
//! as an error rather than a slow page) and reports how many were made in the
//! `x-railyard-grpc-calls` response header, which the tests read. Every call the
//! server answers is bounded in rows and bytes by the server's own page limits, so a
//! bounded number of calls is a bounded number of storage reads.

use std::sync::atomic::{AtomicU32, Ordering};

use railyard_proto::v1 as pb;
use railyard_sdk::{ApiKey, Client, ClientError};

/// The response header that says how many gRPC calls rendered the page.
pub const CALLS_HEADER: &str = "x-railyard-grpc-calls";

/// The most gRPC calls one page (or action) may make.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// The page, for the error a call past the budget gets.
    pub page: &'static str,
    /// The most calls.
    pub calls: u32,
}

/// The runs list: one `ListRuns` page.
pub const RUNS: Budget = Budget {
    page: "runs",
    calls: 1,
};
/// One run: `DescribeRun`, a `GetHistory` page for the waterfall and one for the
/// event history (one call when they are the same page), the `GetSessionTree`.
pub const RUN: Budget = Budget {
    page: "run",
    calls: 4,
};
/// The approvals inbox: up to [`APPROVAL_SCAN_PAGES`] `ListRuns` pages and a
/// `DescribeRun` for each of up to [`APPROVALS_SHOWN`] waiting runs.
pub const APPROVALS: Budget = Budget {
    page: "approvals",
    calls: APPROVAL_SCAN_PAGES + APPROVALS_SHOWN,
};
/// Open runs' pages the approvals inbox reads.
pub const APPROVAL_SCAN_PAGES: u32 = 5;
/// Runs awaiting approval the inbox shows with their proposals.
pub const APPROVALS_SHOWN: u32 = 20;
/// An action: the call itself.
pub const ACTION: Budget = Budget {
    page: "action",
    calls: 1,
};
/// A system table (schedules, triggers, workflows, namespaces, keys): one list call.
pub const SYSTEM: Budget = Budget {
    page: "system",
    calls: 1,
};
/// Task queues: one `ListRuns` page of the latest runs (the queues their steps name)
/// and a `DescribeTaskQueue` for each of up to [`QUEUES_SHOWN`].
pub const QUEUES: Budget = Budget {
    page: "queues",
    calls: 1 + QUEUES_SHOWN,
};
/// Task queues the queues page describes.
pub const QUEUES_SHOWN: u32 = 20;
/// The start form: one `ListWorkflows`.
pub const START_FORM: Budget = Budget {
    page: "start",
    calls: 1,
};
/// A transcript's stream: one `WatchOutput`.
pub const OUTPUT: Budget = Budget {
    page: "transcript",
    calls: 1,
};
/// A transcript page: one `GetStepCheckpoint` page of the step's checkpoint (at most
/// [`CHECKPOINT_PAGE_BYTES`], read from the segments that hold it).
pub const TRANSCRIPT: Budget = Budget {
    page: "transcript",
    calls: 1,
};
/// Checkpoint bytes a transcript page reads.
pub const CHECKPOINT_PAGE_BYTES: u32 = 256 * 1024;
/// Sign-in: up to two probes of what the key may do.
pub const SIGN_IN: Budget = Budget {
    page: "sign-in",
    calls: 2,
};

/// A client calling as one console user, counting its calls.
pub struct Api {
    client: Client,
    /// The namespace the page is about.
    pub ns: String,
    budget: Budget,
    calls: AtomicU32,
}

impl Api {
    /// `client` calling with `key` (none: anonymous, for a server without auth) and
    /// `peer` (the verified client certificate's subject, under mutual TLS).
    pub fn new(
        client: &Client,
        key: Option<&ApiKey>,
        peer: Option<&str>,
        ns: String,
        budget: Budget,
    ) -> Result<Self, ClientError> {
        Ok(Self {
            client: client.with_caller(key, peer)?,
            ns,
            budget,
            calls: AtomicU32::new(0),
        })
    }

    /// The calls made so far.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }

    fn count(&self) -> Result<(), ClientError> {
        let made = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if made > self.budget.calls {
            tracing::error!(
                page = self.budget.page,
                budget = self.budget.calls,
                "a console page went over its gRPC call budget"
            );
            return Err(ClientError::ResourceExhausted(format!(
                "the {} page may make at most {} gRPC calls",
                self.budget.page, self.budget.calls
            )));
        }
        Ok(())
    }

    pub async fn list_runs(&self, mut req: pb::ListRunsRequest) -> Result<pb::ListRunsResponse, ClientError> {
        self.count()?;
        req.namespace = self.ns.clone();
        self.client.list_runs(req).await
    }

    pub async fn describe_run(&self, run: &str) -> Result<pb::DescribeRunResponse, ClientError> {
        self.count()?;
        self.client.describe_run(&self.ns, run).await
    }

    pub async fn get_history(
        &self,
        run: &str,
        from: u64,
        page_size: u32,
    ) -> Result<pb::GetHistoryResponse, ClientError> {
        self.count()?;
        self.client
            .get_history(pb::GetHistoryRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                from_event_id: from,
                page_size,
                wait_timeout_ms: 0,
            })
            .await
    }

    pub async fn session_tree(&self, run: &str) -> Result<pb::GetSessionTreeResponse, ClientError> {
        self.count()?;
        self.client.get_session_tree(&self.ns, run).await
    }

    pub async fn list_workflows(&self) -> Result<pb::ListWorkflowsResponse, ClientError> {
        self.count()?;
        self.client.list_workflows(&self.ns).await
    }

    pub async fn start_run(&self, mut req: pb::StartRunRequest) -> Result<pb::StartRunResponse, ClientError> {
        self.count()?;
        req.namespace = self.ns.clone();
        self.client.start_run_with(req).await
    }

    pub async fn cancel(&self, run: &str, reason: &str) -> Result<(), ClientError> {
        self.count()?;
        self.client
            .cancel_run(pb::CancelRunRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                reason: reason.into(),
                identity: String::new(),
            })
            .await
    }

    pub async fn terminate(&self, run: &str, reason: &str) -> Result<(), ClientError> {
        self.count()?;
        self.client
            .terminate_run(pb::TerminateRunRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                reason: reason.into(),
                identity: String::new(),
            })
            .await
    }

    pub async fn pause(&self, run: &str, reason: &str) -> Result<bool, ClientError> {
        self.count()?;
        self.client
            .pause_run(pb::PauseRunRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                reason: reason.into(),
                identity: String::new(),
            })
            .await
    }

    pub async fn unpause(&self, run: &str) -> Result<bool, ClientError> {
        self.count()?;
        self.client
            .unpause_run(pb::UnpauseRunRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                identity: String::new(),
            })
            .await
    }

    pub async fn signal(&self, run: &str, name: &str, payload_json: String) -> Result<(), ClientError> {
        self.count()?;
        self.client
            .signal_run(pb::SignalRunRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                signal_name: name.into(),
                payload_json,
                identity: String::new(),
                request_id: String::new(),
            })
            .await
    }

    pub async fn approve(&self, run: &str, step: &str, note: &str) -> Result<(), ClientError> {
        self.count()?;
        self.client
            .approve_step(pb::ApproveStepRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                step_id: step.into(),
                note: note.into(),
                identity: String::new(),
            })
            .await
    }

    pub async fn reject(&self, run: &str, step: &str, feedback: &str) -> Result<(), ClientError> {
        self.count()?;
        self.client
            .reject_step(pb::RejectStepRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                step_id: step.into(),
                feedback: feedback.into(),
                identity: String::new(),
            })
            .await
    }

    pub async fn redeliver(&self, run: &str) -> Result<Vec<String>, ClientError> {
        self.count()?;
        self.client
            .redeliver_result(pb::RedeliverResultRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                identity: String::new(),
                target: String::new(),
            })
            .await
    }

    /// The run's live output: the last `tail` chunks kept, then new ones until it closes.
    pub async fn watch_output(
        &self,
        run: &str,
        tail: u64,
    ) -> Result<tonic::Streaming<pb::WatchOutputResponse>, ClientError> {
        self.count()?;
        self.client
            .watch_output_with(pb::WatchOutputRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                from_offset: 0,
                from_end: tail,
            })
            .await
    }

    /// Bytes `offset..` of the checkpoint of the run's step `step` (empty: the step in
    /// flight), a page.
    pub async fn step_checkpoint(
        &self,
        run: &str,
        step: &str,
        offset: u64,
    ) -> Result<pb::GetStepCheckpointResponse, ClientError> {
        self.count()?;
        self.client
            .get_step_checkpoint(pb::GetStepCheckpointRequest {
                namespace: self.ns.clone(),
                run_id: run.into(),
                step_id: step.into(),
                offset,
                max_bytes: CHECKPOINT_PAGE_BYTES,
            })
            .await
    }

    /// Pauses (`pause`), unpauses (`unpause`) or triggers now (`trigger`) a schedule.
    pub async fn patch_schedule(&self, schedule: &str, action: &str, note: &str) -> Result<(), ClientError> {
        self.count()?;
        let mut req = pb::PatchScheduleRequest {
            namespace: self.ns.clone(),
            schedule_id: schedule.into(),
            note: note.into(),
            ..Default::default()
        };
        match action {
            "pause" => req.pause = true,
            "unpause" => req.unpause = true,
            _ => req.trigger = Some(pb::ScheduleTrigger::default()),
        }
        self.client.patch_schedule(req).await.map(drop)
    }

    pub async fn list_schedules(&self, page_token: String) -> Result<pb::ListSchedulesResponse, ClientError> {
        self.count()?;
        self.client
            .list_schedules(pb::ListSchedulesRequest {
                namespace: self.ns.clone(),
                page_size: 100,
                page_token,
            })
            .await
    }

    /// A schedule, with its next `next_fires` fire times.
    pub async fn describe_schedule(
        &self,
        schedule: &str,
        next_fires: u32,
    ) -> Result<pb::ScheduleInfo, ClientError> {
        self.count()?;
        self.client
            .describe_schedule(&self.ns, schedule, next_fires)
            .await
    }

    pub async fn list_triggers(&self, page_token: String) -> Result<pb::ListTriggersResponse, ClientError> {
        self.count()?;
        self.client
            .list_triggers(pb::ListTriggersRequest {
                namespace: self.ns.clone(),
                page_size: 100,
                page_token,
            })
            .await
    }

    pub async fn describe_queue(&self, queue: &str) -> Result<pb::DescribeTaskQueueResponse, ClientError> {
        self.count()?;
        self.client.describe_task_queue(&self.ns, queue).await
    }

    pub async fn list_namespaces(&self) -> Result<Vec<pb::NamespaceInfo>, ClientError> {
        self.count()?;
        self.client.list_namespaces().await
    }

    pub async fn list_keys(&self, page_token: String) -> Result<pb::ListApiKeysResponse, ClientError> {
        self.count()?;
        self.client
            .list_api_keys(pb::ListApiKeysRequest {
                namespace: self.ns.clone(),
                include_revoked: false,
                page_size: 100,
                page_token,
            })
            .await
    }
}
