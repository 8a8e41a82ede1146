//! Python sandbox overhead on the full panel (`cargo bench --bench sandbox`): the cost of
//! one worker round trip (request, the factor's DataFrames built over the memory-mapped
//! panel, the result's 19 MB back over the pipe, checks) against the factor's own compute
//! time measured inside the worker.

use alphaloop::data::{load, LoadOptions};
use alphaloop::sandbox::{PySandbox, SandboxConfig};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/sp500_daily.parquet");
    let data = load(&path, &LoadOptions::default()).expect("data");
    println!("panel: {} dates x {} assets, {} fields", data.n_dates(), data.n_assets(), data.fields.len());
    let cfg = SandboxConfig { worker_exe: PathBuf::from(env!("CARGO_BIN_EXE_alphaloop")), ..SandboxConfig::default() };
    let t = Instant::now();
    let mut sb = PySandbox::start(&data, cfg).expect("start");
    println!("write panels (real + noised twin): {:.2} s", t.elapsed().as_secs_f64());
    let identity = "from alphaloop_factor import Factor\nclass F(Factor):\n    inputs = ['close']\n    def calc(self, data):\n        return data['close']\n";
    let t = Instant::now();
    sb.run(identity, None, "real").expect("first run");
    println!("first request (starts and confines the worker, imports pandas): {:.2} s", t.elapsed().as_secs_f64());
    let breakout = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sandbox/python/examples/volatility_breakout.py")).expect("example");
    let soldiers = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sandbox/python/examples/three_soldiers.py")).expect("example");
    for (name, code) in [("identity (close)", identity), ("volatility_breakout", breakout.as_str()), ("three_soldiers", soldiers.as_str())] {
        let mut trips = Vec::new();
        let mut calcs = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            sb.run(code, None, "real").expect("runs");
            trips.push(t.elapsed().as_secs_f64() * 1e3);
            calcs.push(sb.last_calc_seconds * 1e3);
        }
        trips.sort_by(f64::total_cmp);
        calcs.sort_by(f64::total_cmp);
        let (trip, calc) = (trips[5], calcs[5]);
        println!("{name:<22} round trip p50 {trip:7.1} ms, of which calc {calc:7.1} ms, overhead {:6.1} ms", trip - calc);
    }
    let t = Instant::now();
    sb.evaluate(&breakout, None).expect("evaluate");
    println!("evaluate with look-ahead check (two runs) volatility_breakout: {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
}
