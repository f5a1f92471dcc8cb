//! One logging shim for the engine's messages: `log` records (stderr on Linux, the UART
//! on bare metal), or `defmt` frames with the `defmt` feature. Arguments must be
//! primitives and `&str` so both backends take them.

#[cfg(not(feature = "defmt"))]
#[doc(hidden)]
pub use log::info as __info;

#[cfg(feature = "defmt")]
#[doc(hidden)]
pub use defmt::info as __info;

/// An informational message through the shim.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::logging::__info!($($arg)*) };
}
