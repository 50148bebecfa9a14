//! The process-wide default device: `set_default_device` and `BROTENSOR_DEFAULT_DEVICE`.
//! One test per binary, since the default is global state.

use std::process::Command;

use brotensor::{Device, Dtype, Error, Tensor};

#[test]
fn set_default_device_and_the_environment_variable() {
    let _ = brotensor::init();
    let before = brotensor::default_device();
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
    brotensor::set_default_device(before).unwrap();
    assert_eq!(brotensor::default_device(), before);

    // The variable, in fresh processes (the default is fixed once per process).
    let exe = std::env::current_exe().unwrap();
    for (value, expect) in [("cpu", "default=cpu init=ok"), ("wgpu:77", "default=")] {
        let out = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "child_reports_default",
                "--nocapture",
            ])
            .env(brotensor::DEFAULT_DEVICE_ENV, value)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{value}: {text}");
        assert!(text.contains(expect), "{value}: {text}");
        if value == "wgpu:77" {
            assert!(
                text.contains("init=err brotensor: init: device wgpu:77 is not available"),
                "{text}"
            );
            assert!(!text.contains("default=wgpu:77"), "{text}");
        }
    }
}

/// Run by the test above in a child process with the variable set.
#[test]
#[ignore = "run as a child process by set_default_device_and_the_environment_variable"]
fn child_reports_default() {
    let init = match brotensor::init() {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("err {e}"),
    };
    println!("default={} init={init}", brotensor::default_device());
}
