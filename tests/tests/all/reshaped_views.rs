//! `Tensor::reshaped`: a borrowed view under another shape, with no copy.

use brotensor::{ops, Device, Dtype, Tensor};
use brotensor_tests::{gpu_devices, read_f32};

fn devices() -> Vec<Device> {
    std::iter::once(Device::Cpu).chain(gpu_devices()).collect()
}

#[test]
fn a_view_reads_the_same_elements_under_its_shape_and_leaves_the_source_alone() {
    for d in devices() {
        let data: Vec<f32> = (0..24).map(|i| i as f32 - 7.5).collect();
        let x = Tensor::from_slice_on(d, &data, 4, 6).unwrap();
        {
            let v = x.reshaped(8, 3).unwrap();
            assert_eq!(v.shape(), (8, 3), "{d}");
            assert_eq!(read_f32(&v).unwrap(), data, "{d}");
            // Used as an op input: per-row sums follow the view's rows.
            let mut s = Tensor::default();
            ops::sum_rows(&v, &mut s).unwrap();
            let want: Vec<f32> = data.chunks(3).map(|r| r.iter().sum()).collect();
            assert_eq!(read_f32(&s).unwrap(), want, "{d}");
        }
        assert_eq!(x.shape(), (4, 6), "{d}");
        assert_eq!(read_f32(&x).unwrap(), data, "{d}");
    }
}

#[test]
fn views_never_free_the_buffer_they_borrow() {
    // A view that released its buffer when dropped would free it twice (the source frees it
    // too) or hand it back to the allocator while the source still reads it: after many
    // views and fresh allocations of the same size, the source must hold its values.
    for d in devices() {
        let data: Vec<f32> = (0..4096).map(|i| (i % 97) as f32).collect();
        let x = Tensor::from_slice_on(d, &data, 64, 64).unwrap();
        let mut others = Vec::new();
        for k in 0..50 {
            {
                let v = x.reshaped(4096, 1).unwrap();
                assert_eq!(v.numel(), 4096);
            } // the view ends here
            others.push(Tensor::from_slice_on(d, &vec![k as f32; 4096], 64, 64).unwrap());
        }
        assert_eq!(
            read_f32(&x).unwrap(),
            data,
            "{d}: the source lost its buffer"
        );
        for (k, o) in others.iter().enumerate() {
            assert!(read_f32(o).unwrap().iter().all(|&v| v == k as f32), "{d}");
        }
    }
}

#[test]
fn a_view_of_the_wrong_size_is_a_shape_error() {
    let x = Tensor::zeros_on(Device::Cpu, 4, 6, Dtype::F32).unwrap();
    let e = x.reshaped(5, 5).unwrap_err().to_string();
    assert!(e.starts_with("brotensor: reshaped:"), "{e}");
    assert!(e.contains("24 elements"), "{e}");
    let e = x.reshaped(usize::MAX, 2).unwrap_err().to_string();
    assert!(e.starts_with("brotensor: reshaped:"), "{e}");
}
