use brotensor::{ops, Device, Dtype, Tensor};
fn main() -> brotensor::Result<()> {
    brotensor::init()?;
    for d in brotensor::available_devices() {
        println!("{} f16={:?} bf16={:?}", brotensor::device_name(d)?, brotensor::supports_dtype(d, Dtype::F16)?, brotensor::supports_dtype(d, Dtype::BF16)?);
        let a = Tensor::from_slice_on(d, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3)?;
        let b = Tensor::from_slice_on(d, &[0.5f32; 6], 2, 3)?;
        let c = ops::add(&a, &b)?;
        println!("  add {:?}", c.to_vec::<f32>()?);
        let mut e = ops::exp(&a)?;
        e.add_(&b)?;
        println!("  exp+b {:?}", e.to_vec::<f32>()?);
        let h = a.to_dtype(Dtype::F16);
        if let Ok(h) = h { println!("  f16 {:?}", h.to_vec::<half::f16>()?); }
        let mut r = Tensor::from_slice_on(d, &[0.5f32, 1.5, 2.5, -0.5], 4, 1)?;
        r.round_()?;
        println!("  round {:?}", r.to_vec::<f32>()?);
    }
    let _ = Device::Cpu;
    Ok(())
}
