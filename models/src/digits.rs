//! A small CNN trained end to end on scikit-learn's 8x8 digits with the tape
//! ([`brotensor::autograd`]) and Adam: conv 3x3 (16) -> ReLU -> max pool 2 -> conv 3x3 (32)
//! -> ReLU -> max pool 2 -> linear (10), mean softmax cross-entropy.
//!
//! Everything is seeded as `scripts/digits_reference.py` (the float64 numpy reference of the
//! same training) specifies: the rows shuffled by splitmix64 state 123 before the split
//! (1500 train, 297 test), Xavier weights from splitmix64 state 42 ([`ops::xavier_init`]),
//! zero biases, and each epoch's batch order from a Fisher-Yates shuffle with a splitmix64
//! state of 7 carried across epochs (23 batches of 64; the last 28 rows dropped).

use std::path::Path;

use anyhow::{bail, Context};
use brotensor::autograd::{Adam, Var};
use brotensor::distributed::{all_reduce_gradients, Communicator, ReduceOp};
use brotensor::ops::{self, splitmix64, Conv2dSpec, Pool2dSpec};
use brotensor::{Device, Dtype, Tensor};

/// Pixels per image.
pub const PIXELS: usize = 64;
/// Classes.
pub const CLASSES: usize = 10;
/// Rows in the training split.
pub const TRAIN: usize = 1500;
/// splitmix64 state of the row shuffle before the split.
pub const SPLIT_SEED: u64 = 123;
/// splitmix64 state of the weight initialisation.
pub const INIT_SEED: u64 = 42;
/// splitmix64 state of the batch order.
pub const DATA_SEED: u64 = 7;

/// The digits, split: images as `pixels / 16` in `[0, 1]`, labels `0..10`.
pub struct Digits {
    /// Training images, `TRAIN x 64`, row-major.
    pub train_x: Vec<f32>,
    /// Training labels.
    pub train_y: Vec<usize>,
    /// Test images.
    pub test_x: Vec<f32>,
    /// Test labels.
    pub test_y: Vec<usize>,
}

/// A Fisher-Yates shuffle of `v` driven by the splitmix64 `state`, from the last element
/// down (`j = next % (i + 1)`).
pub fn shuffle<T>(v: &mut [T], state: &mut u64) {
    for i in (1..v.len()).rev() {
        let j = (splitmix64(state) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

impl Digits {
    /// Reads `digits.csv` (65 integers per row) and splits it after the seeded shuffle.
    pub fn load(path: &Path) -> anyhow::Result<Digits> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut rows: Vec<(Vec<f32>, usize)> = Vec::new();
        for (n, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            let values: Vec<u32> = line
                .split(',')
                .map(|v| v.trim().parse::<u32>())
                .collect::<Result<_, _>>()
                .with_context(|| format!("{} line {}", path.display(), n + 1))?;
            if values.len() != PIXELS + 1 || values[PIXELS] as usize >= CLASSES {
                bail!(
                    "{} line {}: expected 64 pixels and a label",
                    path.display(),
                    n + 1
                );
            }
            let pixels = values[..PIXELS].iter().map(|&p| p as f32 / 16.0).collect();
            rows.push((pixels, values[PIXELS] as usize));
        }
        if rows.len() <= TRAIN {
            bail!("{}: {} rows, expected 1797", path.display(), rows.len());
        }
        let mut state = SPLIT_SEED;
        shuffle(&mut rows, &mut state);
        let (train, test) = rows.split_at(TRAIN);
        let flat = |part: &[(Vec<f32>, usize)]| -> (Vec<f32>, Vec<usize>) {
            (
                part.iter().flat_map(|r| r.0.iter().copied()).collect(),
                part.iter().map(|r| r.1).collect(),
            )
        };
        let ((train_x, train_y), (test_x, test_y)) = (flat(train), flat(test));
        Ok(Digits {
            train_x,
            train_y,
            test_x,
            test_y,
        })
    }

    /// The images of `rows` (indices into the training split) as an `(n, 1, 8, 8)` tensor
    /// on `device`, and their labels; an index past the split is an error.
    pub fn batch(&self, rows: &[usize], device: Device) -> brotensor::Result<(Tensor, Vec<usize>)> {
        if let Some(&bad) = rows.iter().find(|&&r| r >= self.train_y.len()) {
            return Err(brotensor::Error::InvalidArgument {
                op: "digits::batch",
                reason: format!(
                    "row {bad} is past the {} training images",
                    self.train_y.len()
                ),
            });
        }
        let mut x = Vec::with_capacity(rows.len().saturating_mul(PIXELS));
        for &r in rows {
            x.extend_from_slice(&self.train_x[r * PIXELS..][..PIXELS]);
        }
        let t = Tensor::from_slice_nd_on(device, &x, &[rows.len(), 1, 8, 8])?;
        Ok((t, rows.iter().map(|&r| self.train_y[r]).collect()))
    }
}

/// The network's parameters.
pub struct Cnn {
    /// `(16, 1, 3, 3)`.
    pub conv1_w: Var,
    /// `(16)`.
    pub conv1_b: Var,
    /// `(32, 16, 3, 3)`.
    pub conv2_w: Var,
    /// `(32)`.
    pub conv2_b: Var,
    /// `(10, 128)`.
    pub fc_w: Var,
    /// `(10)`.
    pub fc_b: Var,
}

/// The network's convolutions: 3x3, stride 1, padding 1.
pub const CONV: Conv2dSpec = Conv2dSpec {
    kernel: [3, 3],
    stride: [1, 1],
    padding: [1, 1],
    dilation: [1, 1],
    groups: 1,
};

/// The network's pooling: 2x2 max, stride 2.
pub const POOL: Pool2dSpec = Pool2dSpec {
    kernel: [2, 2],
    stride: [2, 2],
    padding: [0, 0],
    dilation: [1, 1],
    ceil_mode: false,
};

impl Cnn {
    /// Xavier weights (splitmix64 state [`INIT_SEED`], in the order conv1, conv2, fc) and
    /// zero biases on `device`.
    pub fn new(device: Device) -> brotensor::Result<Cnn> {
        let mut state = INIT_SEED;
        let mut weight = |dims: &[usize]| -> brotensor::Result<Var> {
            let mut w = Tensor::empty_nd_on(device, dims, Dtype::F32)?;
            ops::xavier_init(&mut w, &mut state)?;
            Ok(Var::parameter(w))
        };
        let (conv1_w, conv2_w, fc_w) = (
            weight(&[16, 1, 3, 3])?,
            weight(&[32, 16, 3, 3])?,
            weight(&[10, 128])?,
        );
        let zeros = |n: usize| -> brotensor::Result<Var> {
            Ok(Var::parameter(Tensor::zeros_nd_on(
                device,
                &[n],
                Dtype::F32,
            )?))
        };
        Ok(Cnn {
            conv1_w,
            conv1_b: zeros(16)?,
            conv2_w,
            conv2_b: zeros(32)?,
            fc_w,
            fc_b: zeros(10)?,
        })
    }

    /// Every parameter, in a fixed order.
    pub fn parameters(&self) -> Vec<Var> {
        [
            &self.conv1_w,
            &self.conv1_b,
            &self.conv2_w,
            &self.conv2_b,
            &self.fc_w,
            &self.fc_b,
        ]
        .map(Var::clone)
        .to_vec()
    }

    /// The logits `(n, 10)` of images `x (n, 1, 8, 8)`.
    pub fn forward(&self, x: &Var) -> brotensor::Result<Var> {
        let n = match *x.value().dims() {
            [n, 1, 8, 8] => n,
            ref other => {
                return Err(brotensor::Error::Shape {
                    op: "digits::forward",
                    reason: format!("expected images (n, 1, 8, 8), got {other:?}"),
                })
            }
        };
        x.conv2d(&self.conv1_w, Some(&self.conv1_b), &CONV)?
            .relu()?
            .max_pool2d(&POOL)?
            .conv2d(&self.conv2_w, Some(&self.conv2_b), &CONV)?
            .relu()?
            .max_pool2d(&POOL)?
            .reshape(&[n, 128])?
            .linear(&self.fc_w, Some(&self.fc_b))
    }

    /// The share of `images` (`n x 64`) whose largest logit is their label.
    pub fn accuracy(
        &self,
        images: &[f32],
        labels: &[usize],
        device: Device,
    ) -> brotensor::Result<f64> {
        let n = labels.len();
        let x = Var::constant(Tensor::from_slice_nd_on(device, images, &[n, 1, 8, 8])?);
        let logits = self.frozen()?.forward(&x)?;
        let predicted = logits.value().argmax(1)?.to_vec::<i32>()?;
        let right = predicted
            .iter()
            .zip(labels)
            .filter(|(&p, &l)| p as usize == l)
            .count();
        Ok(right as f64 / n.max(1) as f64)
    }

    /// The same weights as constants (copies): a forward that records nothing.
    fn frozen(&self) -> brotensor::Result<Cnn> {
        Ok(Cnn {
            conv1_w: self.conv1_w.detach()?,
            conv1_b: self.conv1_b.detach()?,
            conv2_w: self.conv2_w.detach()?,
            conv2_b: self.conv2_b.detach()?,
            fc_w: self.fc_w.detach()?,
            fc_b: self.fc_b.detach()?,
        })
    }
}

/// Training: the network, its optimizer and the batch order.
pub struct Trainer {
    /// The network.
    pub net: Cnn,
    adam: Adam,
    device: Device,
    order_state: u64,
    order: Vec<usize>,
    next_batch: usize,
    batch: usize,
}

impl Trainer {
    /// A fresh network on `device`, Adam with learning rate `lr`, batches of `batch`
    /// (1 to [`TRAIN`]).
    pub fn new(device: Device, lr: f32, batch: usize) -> brotensor::Result<Trainer> {
        if !(1..=TRAIN).contains(&batch) {
            return Err(brotensor::Error::InvalidArgument {
                op: "digits::Trainer::new",
                reason: format!("the batch must hold 1 to {TRAIN} images, got {batch}"),
            });
        }
        let net = Cnn::new(device)?;
        let adam = Adam::new(net.parameters(), ops::AdamParams::new(lr));
        Ok(Trainer {
            net,
            adam,
            device,
            order_state: DATA_SEED,
            order: Vec::new(),
            next_batch: usize::MAX,
            batch,
        })
    }

    /// Full batches per epoch.
    pub fn steps_per_epoch(&self) -> usize {
        TRAIN / self.batch
    }

    /// The rows of the next batch (a new epoch's order when the last one is used up).
    fn next_rows(&mut self) -> &[usize] {
        if self.next_batch >= self.steps_per_epoch() {
            self.order = (0..TRAIN).collect();
            shuffle(&mut self.order, &mut self.order_state);
            self.next_batch = 0;
        }
        self.next_batch += 1;
        &self.order[(self.next_batch - 1) * self.batch..][..self.batch]
    }

    /// One step on the next batch (a new epoch's order when the last one is used up);
    /// returns the batch's loss before the update.
    pub fn step(&mut self, data: &Digits) -> brotensor::Result<f32> {
        let rows = self.next_rows().to_vec();
        let (x, labels) = data.batch(&rows, self.device)?;
        let loss = self
            .net
            .forward(&Var::constant(x))?
            .cross_entropy(&labels)?;
        let value = loss.value().to_vec::<f32>()?[0];
        loss.backward()?;
        drop(loss);
        self.adam.step()?;
        self.adam.zero_grad();
        Ok(value)
    }

    /// [`Trainer::step`] split over the ranks of `comm` (data parallelism): every rank holds
    /// the same network and batch order and calls this together; each runs the forward and
    /// backward of its share of the batch (the first `batch % world` ranks take one row
    /// more), the gradients are summed weighted by the shares
    /// ([`all_reduce_gradients`]), and every rank takes the same Adam step, so the weights
    /// follow one rank's training on the whole batch. Returns the whole batch's mean loss.
    /// Errors when the batch has fewer rows than there are ranks.
    pub fn step_data_parallel(
        &mut self,
        data: &Digits,
        comm: &dyn Communicator,
    ) -> brotensor::Result<f32> {
        let (rank, world) = (comm.rank(), comm.world_size());
        if self.batch < world {
            return Err(brotensor::Error::InvalidArgument {
                op: "digits::Trainer::step_data_parallel",
                reason: format!("a batch of {} rows cannot feed {world} ranks", self.batch),
            });
        }
        let (q, rem) = (self.batch / world, self.batch % world);
        let lo = rank * q + rank.min(rem);
        let mine = q + usize::from(rank < rem);
        let rows = self.next_rows()[lo..lo + mine].to_vec();
        let share = mine as f32 / self.batch as f32;
        let (x, labels) = data.batch(&rows, self.device)?;
        let loss = self
            .net
            .forward(&Var::constant(x))?
            .cross_entropy(&labels)?;
        let mut total = Tensor::from_slice_on(
            Device::Cpu,
            &[loss.value().to_vec::<f32>()?[0] * share],
            1,
            1,
        )?;
        loss.backward()?;
        drop(loss);
        all_reduce_gradients(comm, &self.net.parameters(), share)?;
        comm.all_reduce(&mut total, ReduceOp::Sum)?;
        self.adam.step()?;
        self.adam.zero_grad();
        Ok(total.to_vec::<f32>()?[0])
    }
}
