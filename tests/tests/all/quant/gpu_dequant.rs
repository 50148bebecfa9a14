//! GPU dequantization of every weight block type.
