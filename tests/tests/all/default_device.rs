//! The process-wide default device: `set_default_device` and `BROTENSOR_DEFAULT_DEVICE`.
//! The default is global state and fixed once per process, so each check runs in a child
//! process of this test binary (the ignored test below), leaving this process untouched.

use brotensor::{Device, Dtype, Error, Tensor};

/// Runs the child check with `BROTENSOR_DEFAULT_DEVICE` set to `value` (or unset) and
/// returns what it printed.
fn child(value: Option<&str>) -> String {
    brotensor_tests::run_child_test(
        "default_device::child_reports_default",
        brotensor::DEFAULT_DEVICE_ENV,
        value,
    )
}

#[test]
fn set_default_device_and_the_environment_variable() {
    let text = child(None);
    assert!(text.contains("init=ok"), "{text}");
    let text = child(Some("cpu"));
    assert!(text.contains("default=cpu init=ok"), "{text}");
    let text = child(Some("wgpu:77"));
    assert!(
        text.contains("init=err brotensor: init: device wgpu:77 is not available"),
        "{text}"
    );
    assert!(!text.contains("default=wgpu:77"), "{text}");
    let text = child(Some("tpu"));
    assert!(
        text.contains("init=err brotensor: parse_device: unknown device `tpu`"),
        "{text}"
    );
}

/// Run by the test above in a child process.
#[test]
#[ignore = "run in a child process by set_default_device_and_the_environment_variable"]
fn child_reports_default() {
    let init = match brotensor::init() {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("err {e}"),
    };
    let default = brotensor::default_device();
    println!("default={default} init={init}");
    assert!(brotensor::is_available(default));

    brotensor::set_default_device(Device::Cpu).unwrap();
    assert_eq!(
        Tensor::zeros(2, 2, Dtype::F32).unwrap().device(),
        Device::Cpu
    );
    match brotensor::set_default_device(Device::Cuda(42)) {
        Err(Error::DeviceUnavailable { op, device, .. }) => {
            assert_eq!((op, device), ("set_default_device", Device::Cuda(42)))
        }
        other => panic!("expected DeviceUnavailable, got {other:?}"),
    }
    assert_eq!(
        brotensor::default_device(),
        Device::Cpu,
        "a refused set changes nothing"
    );
    brotensor::set_default_device(default).unwrap();
    assert_eq!(Tensor::zeros(1, 1, Dtype::F32).unwrap().device(), default);
    println!("child done");
}
