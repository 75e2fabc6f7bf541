//! `fleetbench jobs`: the controller's jobs, newest first. Also home of the controller
//! connection every job command shares ([`ControllerArgs`], [`connect`]).

use fleetbench_proto::Word;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use fleetbench_proto::controllerpb::{
    Job, JobKind, JobState, ListJobsRequest, controller_client::ControllerClient,
};
use fleetbench_support::grpc::{self, ClientTls};
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// How to reach a controller.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Controller API URL (`http://127.0.0.1:7070`, `https://ctl:7070`); several, comma
    /// separated, for controllers sharing one store: the leader among them is used.
    #[arg(long, env = "FLEETBENCH_CONTROLLER")]
    pub controller: Option<String>,
    /// Bearer token for the controller's API. On the command line it shows in `ps`: prefer
    /// FLEETBENCH_TOKEN or --token-file. Sent only over https or to a loopback address.
    #[arg(long, env = "FLEETBENCH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the bearer token (its first line), instead of --token.
    #[arg(long, conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// CA certificate of an https controller (with --tls-cert and --tls-key for mTLS).
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate for mTLS.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// Client key for mTLS.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
}

/// Adds `authorization: Bearer TOKEN` to every call when a token is given.
#[derive(Debug, Clone)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A client of the controller API.
pub type Client = ControllerClient<InterceptedService<Channel, Bearer>>;

impl ControllerArgs {
    /// The URL given, or an error saying how to give one.
    pub fn url(&self) -> anyhow::Result<&str> {
        self.controller.as_deref().context(
            "no controller: give --controller URL or set FLEETBENCH_CONTROLLER \
             (only `fleetbench run` starts an embedded one)",
        )
    }
}

/// The metadata key under which a standby controller names the leader's URL.
pub(crate) const LEADER_KEY: &str = "fleetbench-leader";

/// Connects to the controller at `url` (or to the leader among several comma-separated URLs)
/// with the token and TLS material of `args`. A standby answers every call UNAVAILABLE with
/// the leader's URL; the client then goes there, so one standby's address is enough too.
pub async fn connect(url: &str, args: &ControllerArgs) -> anyhow::Result<Client> {
    let mut candidates: Vec<String> = url
        .split(',')
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
        .collect();
    if candidates.len() <= 1 && !url.contains(',') {
        // One address: connect, and follow a standby's pointer to the leader if it has one.
        let mut c = connect_one(url, args).await?;
        if let Some(leader) = asked(url, standby_pointer(&mut c)).await?
            && leader != url
        {
            eprintln!("{url} is a standby; using the leader at {leader}");
            return connect_one(&leader, args).await;
        }
        return Ok(c);
    }
    let mut problems = Vec::new();
    let mut i = 0;
    while i < candidates.len() && i < 8 {
        let u = candidates[i].clone();
        i += 1;
        let mut c = match connect_one(&u, args).await {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{u}: {e:#}"));
                continue;
            }
        };
        match asked(&u, standby_pointer(&mut c)).await {
            Ok(None) => return Ok(c),
            Ok(Some(leader)) => {
                problems.push(format!("{u}: a standby (leader: {leader})"));
                if !candidates.contains(&leader) {
                    candidates.push(leader);
                }
            }
            Err(e) => problems.push(format!("{u}: {e:#}")),
        }
    }
    anyhow::bail!(
        "no leading controller among --controller {url}:\n  {}",
        problems.join("\n  ")
    )
}

/// How long a controller may take to say whether it leads: a frozen one (its kernel still
/// accepts connections) must not hold up the next address of `--controller`.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

async fn asked<T>(
    url: &str,
    f: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(ASK_TIMEOUT, f)
        .await
        .map_err(|_| anyhow::anyhow!("{url} did not answer within {ASK_TIMEOUT:?}"))?
}

/// `Some(leader URL)` when this controller is a standby that names its leader; an error when
/// it does not lead and names none (starting, or the leader unknown).
async fn standby_pointer(c: &mut Client) -> anyhow::Result<Option<String>> {
    // ListAgents: answered from memory, so a leader whose store is failing still answers.
    match c
        .list_agents(fleetbench_proto::controllerpb::ListAgentsRequest {})
        .await
    {
        Err(s) if s.code() == tonic::Code::Unavailable => {
            match s.metadata().get(LEADER_KEY).and_then(|v| v.to_str().ok()) {
                Some(l) if !l.is_empty() => Ok(Some(l.to_string())),
                _ => anyhow::bail!("{}", s.message()),
            }
        }
        // Anything else (an answer, a refusal of this caller) comes from a leader.
        _ => Ok(None),
    }
}

/// A bearer token goes over `https`, or over `http` only to a loopback address: anyone on
/// the path of a plaintext connection reads it (the controller refuses such a token too, but
/// only after it has crossed the network).
fn plaintext_token_check(url: &str) -> anyhow::Result<()> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Ok(());
    };
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = match host.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => h,
        _ => host,
    };
    let host = host.trim_matches(['[', ']']);
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    anyhow::ensure!(
        loopback,
        "refusing to send the token over plaintext to {host} ({url}): use an https:// \
         controller URL with --tls-ca, or a loopback address"
    );
    Ok(())
}

/// Connects to one controller URL.
async fn connect_one(url: &str, args: &ControllerArgs) -> anyhow::Result<Client> {
    let tls = match &args.tls_ca {
        Some(ca) => Some(ClientTls {
            ca,
            cert: args
                .tls_cert
                .as_ref()
                .context("--tls-cert is required with --tls-ca")?,
            key: args
                .tls_key
                .as_ref()
                .context("--tls-key is required with --tls-ca")?,
            domain: None,
        }),
        None => None,
    };
    let ep = grpc::endpoint(url, tls).context("--controller")?;
    let channel = ep
        .connect()
        .await
        .with_context(|| format!("cannot reach the controller at {url}"))?;
    let token = match (&args.token, &args.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("--token-file {}", f.display()))?
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
        (None, None) => None,
    };
    if token.is_some() {
        plaintext_token_check(url)?;
    }
    let bearer = match &token {
        Some(t) => Some(
            format!("Bearer {t}")
                .parse::<AsciiMetadataValue>()
                .context("--token holds characters not allowed in a header")?,
        ),
        None => None,
    };
    Ok(ControllerClient::with_interceptor(channel, Bearer(bearer))
        .max_decoding_message_size(256 * 1024 * 1024))
}

/// Seconds since a unix-ms timestamp, as "3m 12s".
pub fn ago(unix_ms: i64) -> String {
    if unix_ms <= 0 {
        return "-".into();
    }
    let secs = ((fleetbench_proto::now_unix_ms() - unix_ms).max(0) / 1000) as u64;
    format!(
        "{} ago",
        humantime::format_duration(std::time::Duration::from_secs(secs))
    )
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show this job (id, id prefix or name) with every level result: host, config, load,
    /// throughput, p99 latency and the GPU power measured during the level.
    pub job: Option<String>,
    /// With JOB: print everything stored for it as JSON (the shape of results.json).
    #[arg(long, requires = "job")]
    pub json: bool,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// How many jobs to show.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Only jobs of this kind: sweep (`fleetbench run`), tune (rounds of a tuning search) or
    /// regress (regression suite runs).
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,
}

/// A job kind on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    Sweep,
    Tune,
    Regress,
}

impl From<KindArg> for JobKind {
    fn from(k: KindArg) -> JobKind {
        match k {
            KindArg::Sweep => JobKind::Sweep,
            KindArg::Tune => JobKind::Tune,
            KindArg::Regress => JobKind::Regress,
        }
    }
}

fn print_jobs(jobs: &[Job]) {
    println!(
        "{:<32}  {:<24}  {:<7}  {:<10}  {:>7}  {:>7}  {:>7}  CREATED",
        "ID", "NAME", "KIND", "STATE", "TRIALS", "LEVELS", "CRASHES"
    );
    for j in jobs {
        println!(
            "{:<32}  {:<24}  {:<7}  {:<10}  {:>7}  {:>7}  {:>7}  {}",
            j.id,
            j.name,
            JobKind::word_of(j.kind),
            JobState::word_of(j.state),
            format!("{}/{}", j.trials_done, j.trials_total),
            format!("{}/{}", j.levels_done, j.levels_total),
            j.crashes,
            ago(j.created_unix_ms),
        );
        if !j.error.is_empty() {
            println!("    error: {}", j.error);
        }
    }
}

/// One job with its level results, as a table (or JSON).
async fn show_job(args: &Args, given: &str) -> anyhow::Result<ExitCode> {
    let data_dir = std::path::Path::new(super::run::DEFAULT_DATA_DIR);
    let mut source = super::report::Source::open(&args.controller, data_dir).await?;
    let id = source.resolve_job(given).await?;
    let ids = [id];
    let results = source.results(&ids, false).await?;
    let compare = source.compare(&ids, &results, &[], 0.0).await?;
    source.close().await;
    if args.json {
        let doc = crate::report::results_json(&results, &compare);
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_jobs(&results.jobs);
    print!("{}", levels_table(&results.levels));
    Ok(ExitCode::SUCCESS)
}

/// Every stored level: where and what ran, what it measured, and its GPU power ("-": the host
/// reported none).
fn levels_table(levels: &[fleetbench_proto::controllerpb::StoredLevel]) -> String {
    use crate::report::{fmt_num, table::compact_table};
    let mut t = compact_table();
    t.set_header(vec![
        "host",
        "config",
        "workload",
        "repeat",
        "level",
        "outcome",
        "out tok/s",
        "ITL p99",
        "GPU W",
    ]);
    for l in levels {
        let Some(r) = &l.result else { continue };
        let p99 = r
            .itl_ms
            .as_ref()
            .and_then(|d| d.percentiles.get("p99").copied());
        t.add_row(vec![
            l.host.clone(),
            l.config_name.clone(),
            l.workload.clone(),
            l.repeat.to_string(),
            fleetbench_spec::level_label(&r.level.unwrap_or_default()),
            fleetbench_proto::agentpb::LevelOutcome::word_of(r.outcome),
            fmt_num(r.output_tokens_per_s, 1),
            p99.map_or("-".into(), |v| format!("{} ms", fmt_num(v, 2))),
            l.gpu_power_w.map_or("-".into(), |w| fmt_num(w, 0)),
        ]);
    }
    format!("\nlevels ({}):\n{t}\n", levels.len())
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(job) = &args.job {
        return show_job(&args, job).await;
    }
    let kind = args.kind.map(JobKind::from);
    let jobs = match &args.controller.controller {
        Some(url) => {
            let mut client = connect(url, &args.controller).await?;
            client
                .list_jobs(ListJobsRequest {
                    limit: args.limit,
                    kind: kind.unwrap_or(JobKind::Unspecified) as i32,
                })
                .await
                .context("ListJobs")?
                .into_inner()
                .jobs
        }
        None => {
            // No controller: the jobs `fleetbench run` kept in the embedded store here.
            let db = std::path::Path::new(super::run::DEFAULT_DATA_DIR).join("controller.db");
            if !db.exists() {
                anyhow::bail!(
                    "no controller given (--controller or FLEETBENCH_CONTROLLER) and no \
                     embedded store at {}",
                    db.display()
                );
            }
            let store =
                fleetbench_controller::store::Store::open(&format!("sqlite://{}", db.display()))
                    .await?;
            let jobs = store.list_jobs_of_kind(args.limit, kind).await?;
            store.close().await;
            jobs
        }
    };
    if jobs.is_empty() {
        println!("no jobs");
    } else {
        print_jobs(&jobs);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_token_goes_only_over_https_or_loopback() {
        use super::plaintext_token_check as ok;
        assert!(ok("https://ctl.example:7070").is_ok());
        assert!(ok("http://127.0.0.1:7070").is_ok());
        assert!(ok("http://localhost:7070").is_ok());
        assert!(ok("http://[::1]:7070").is_ok());
        let e = ok("http://10.0.0.5:7070").unwrap_err().to_string();
        assert!(
            e.contains("refusing to send the token over plaintext to 10.0.0.5"),
            "{e}"
        );
        assert!(ok("http://ctl.example").is_err());
    }
}
