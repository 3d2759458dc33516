use super::*;

const MINIMAL: &str = r#"
duration = "10s"
warmup = "5s"
[service.pool]
workers = 2
[load]
rate = 10
timeout = "1s"
[[arms]]
name = "off"
kind = "off"
[[arms]]
name = "tidegate default"
"#;

fn invalid(doc: &str) -> String {
    Scenario::parse(doc, "test").unwrap_err().to_string()
}

#[test]
fn a_minimal_scenario_parses_with_defaults() {
    let s = Scenario::parse(MINIMAL, "minimal").unwrap();
    assert_eq!(s.name, "minimal");
    assert_eq!(s.seed, 1);
    assert_eq!(s.arms[1].gate_config(), GateConfig::default());
    assert_eq!(s.arms[0].kind, ArmKind::Off);
}

#[test]
fn unknown_keys_are_named_with_their_line() {
    let doc = MINIMAL.replace("workers = 2", "workers = 2\nworkerz = 3");
    let err = invalid(&doc);
    assert!(err.contains("workerz") && err.contains("line 6"), "{err}");
    let doc = format!("{MINIMAL}limit = {{ algorithm = \"aimd\", aimd = {{ backof = 1 }} }}\n");
    let err = invalid(&doc);
    assert!(err.contains("backof") && err.contains("line 14"), "{err}");
}

#[test]
fn cross_key_errors_name_the_key() {
    let err = invalid(&MINIMAL.replace("warmup = \"5s\"", "warmup = \"10s\""));
    assert!(err.contains("`warmup`"), "{err}");
    let doc = MINIMAL.replace("kind = \"off\"", "kind = \"off\"\nqueue = { capacity = 3 }");
    let err = invalid(&doc);
    assert!(err.contains("arms[0] (off).queue"), "{err}");
    let doc = MINIMAL.replace("kind = \"off\"", "kind = \"static_lease\"");
    let err = invalid(&doc);
    assert!(err.contains("arms[0] (off).lease"), "{err}");
    let doc = MINIMAL.replace("name = \"tidegate default\"", "name = \"off\"");
    let err = invalid(&doc);
    assert!(err.contains("two arms"), "{err}");
    let err = invalid(&MINIMAL.replace("rate = 10", "rate = 10\nrates = [1]"));
    assert!(err.contains("`load.rate`"), "{err}");
    let err = invalid(&MINIMAL.replace("workers = 2", "workers = 0"));
    assert!(err.contains("line 5"), "{err}");
}

#[test]
fn shortening_scales_the_schedule_not_the_service() {
    let doc = r#"
duration = "100s"
warmup = "50s"
overload_at = "20s"
[service.pool]
work = "1s"
[[service.changes]]
at = "40s"
work = "2s"
[load]
timeout = "2500ms"
[[load.phases]]
duration = "30s"
rate = 1
[[load.phases]]
duration = "70s"
rate = 5
[[arms]]
name = "off"
kind = "off"
"#;
    let s = Scenario::parse(doc, "t")
        .unwrap()
        .shortened(Nanos::from_secs(10));
    assert_eq!(s.warmup, Nanos::from_secs(5));
    assert_eq!(s.overload_at, Some(Nanos::from_secs(2)));
    assert_eq!(s.load.phases[0].duration, Nanos::from_secs(3));
    assert_eq!(s.service.changes[0].at, Nanos::from_secs(4));
    assert_eq!(s.service.pool.work, Nanos::from_secs(1));
    assert_eq!(s.load.timeout, Nanos::from_millis(2500));
}

#[test]
fn a_selection_keeps_the_named_arms_and_load_points_or_names_what_is_missing() {
    let sweep = MINIMAL.replace("rate = 10", "rates = [10, 20, 30]");
    let mut s = Scenario::parse(&sweep, "sweep").unwrap();
    s.keep_arms(&[]).unwrap();
    s.keep_loads(&[]).unwrap();
    assert_eq!(
        (s.arms.len(), s.load.rates.len()),
        (2, 3),
        "nothing named keeps all"
    );
    s.keep_arms(&["tidegate default".to_owned()]).unwrap();
    s.keep_loads(&[30.0, 10.0]).unwrap();
    assert_eq!(s.arms.len(), 1);
    let rates: Vec<f64> = s.load.rates.iter().map(|r| r.get()).collect();
    assert_eq!(rates, [30.0, 10.0]);
    assert_eq!(
        s.keep_arms(&["of".to_owned()]).unwrap_err().to_string(),
        "arm \"of\": sweep has no such arm (its arms: tidegate default)"
    );
    assert_eq!(
        s.keep_loads(&[20.0]).unwrap_err().to_string(),
        "load 20: sweep has no such load point (its points: [30.0, 10.0])"
    );
}
