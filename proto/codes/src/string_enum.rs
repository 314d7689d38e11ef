//! [`string_enum!`]: an enum whose variants each have one stable name, and
//! [`UnknownName`], the error of reading a name that is none of them.
//!
//! Tether stores and sends many small closed sets by name (failure codes, run
//! error kinds, the turn's steps, call statuses, ledger states, approval
//! verdicts). Written by hand, each repeats the variant list three times (the
//! enum, `as_str`, `ALL`) and nothing checks that the copies agree or that the
//! names are distinct. The macro takes the list once. A derive macro would do
//! the same, but would need a proc-macro crate of its own; a declarative
//! macro needs nothing, and builds for the `wasm32` guests as it is.

use std::fmt;

/// Defines an enum whose variants each have one stable name, written once
/// next to the variant.
///
/// ```
/// tether_codes::string_enum! {
///     /// How a light is set.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
///     pub enum Light {
///         /// No light.
///         Off => "off",
///         /// Full light.
///         On => "on",
///         /// Somewhere between.
///         Dimmed => "dimmed",
///     }
/// }
///
/// assert_eq!(Light::Dimmed.as_str(), "dimmed");
/// assert_eq!(Light::ALL, [Light::Off, Light::On, Light::Dimmed]);
/// assert_eq!(Light::parse("on"), Some(Light::On));
/// assert_eq!(Light::parse("On"), None, "names match exactly");
/// assert_eq!("off".parse::<Light>(), Ok(Light::Off));
/// assert_eq!(Light::On.to_string(), "on");
/// let error = "bright".parse::<Light>().unwrap_err();
/// assert_eq!(error.to_string(), "unknown `Light` `bright`: expected one of `off`, `on`, `dimmed`");
/// ```
///
/// It generates, with the enum's own visibility:
/// - the enum, with the attributes and doc comments given (derive what you
///   need; `as_str` takes `self` by value, so derive `Copy`), each variant
///   unit-like, without a discriminant;
/// - `ALL`: an array of every variant, in the order written;
/// - `as_str(self) -> &'static str`: the variant's name;
/// - `parse(&str) -> Option<Self>`: the variant of that exact name
///   (case-sensitive), `None` for any other string;
/// - `Display`, which writes `as_str`, and `FromStr`, which is `parse` with an
///   [`UnknownName`] error naming the type, the string and every name.
///
/// Guarantees: `ALL` holds each variant exactly once;
/// `parse(v.as_str()) == Some(v)` for every variant `v`, and
/// `v.to_string() == v.as_str()`. Two variants with the same name do not
/// compile (a compile-time assertion). Add further methods, such as a second
/// name, in an `impl` block of your own beside the macro.
///
/// ```compile_fail
/// tether_codes::string_enum! {
///     /// Two names alike.
///     #[derive(Clone, Copy)]
///     pub enum Twice {
///         /// One.
///         A => "same",
///         /// The other.
///         B => "same",
///     }
/// }
/// ```
#[macro_export]
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident => $string:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $(
                $(#[$variant_meta])*
                $variant,
            )+
        }

        impl $name {
            /// Every variant, each once, in the order the definition lists them.
            $vis const ALL: [$name; [$($string),+].len()] = [$($name::$variant),+];

            /// The variant's stable name; no two variants share one.
            $vis fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $string,)+
                }
            }

            /// The variant named `name` by [`Self::as_str`] (an exact,
            /// case-sensitive match), or `None`.
            $vis fn parse(name: &str) -> ::core::option::Option<$name> {
                match name {
                    $($string => ::core::option::Option::Some($name::$variant),)+
                    _ => ::core::option::Option::None,
                }
            }
        }

        // Distinct names, or `parse` could not give every variant back.
        const _: () = $crate::__assert_distinct(
            &[$($string),+],
            concat!("two variants of `", stringify!($name), "` have the same name"),
        );

        /// Writes [`Self::as_str`].
        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// [`Self::parse`], with an error that lists every name.
        impl ::core::str::FromStr for $name {
            type Err = $crate::UnknownName;

            fn from_str(name: &str) -> ::core::result::Result<$name, $crate::UnknownName> {
                $name::parse(name).ok_or_else(|| $crate::UnknownName {
                    type_name: stringify!($name),
                    name: name.into(),
                    expected: &[$($string),+],
                })
            }
        }
    };
}

/// A string that names no variant of a [`string_enum!`] enum: the error of
/// its `FromStr`.
///
/// Displays as "unknown `Light` `bright`: expected one of `off`, `on`, `dimmed`".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// The enum's type name, e.g. `"Code"`.
    pub type_name: &'static str,
    /// The string that was read.
    pub name: String,
    /// Every name the enum has, in the order of its `ALL`.
    pub expected: &'static [&'static str],
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown `{}` `{}`: expected one of ", self.type_name, self.name)?;
        for (index, name) in self.expected.iter().enumerate() {
            let comma = if index == 0 { "" } else { ", " };
            write!(f, "{comma}`{name}`")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownName {}

/// Panics with `message` when two of `names` are equal. [`string_enum!`]
/// calls it in a constant, so the panic is a compile error.
#[doc(hidden)]
pub const fn assert_distinct(names: &[&str], message: &str) {
    let mut i = 0;
    while i < names.len() {
        let mut j = i + 1;
        while j < names.len() {
            if equal(names[i], names[j]) {
                panic!("{}", message);
            }
            j += 1;
        }
        i += 1;
    }
}

/// `a == b`, which is not `const` for `str`.
const fn equal(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    crate::string_enum! {
        /// A set of one, the smallest the macro takes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Single {
            /// The only one.
            Only => "only",
        }
    }

    #[test]
    fn a_set_of_one_round_trips_and_refuses_every_other_name() {
        assert_eq!(Single::ALL, [Single::Only]);
        assert_eq!(Single::parse(Single::Only.as_str()), Some(Single::Only));
        for other in ["", "Only", "only ", "onl"] {
            assert_eq!(Single::parse(other), None, "{other:?}");
        }
        let error = "x".parse::<Single>().unwrap_err();
        assert_eq!(error.to_string(), "unknown `Single` `x`: expected one of `only`");
    }

    #[test]
    fn assert_distinct_passes_distinct_names_and_catches_equal_ones() {
        super::assert_distinct(&["a", "ab", "b", "ba"], "alike");
        let caught = std::panic::catch_unwind(|| super::assert_distinct(&["a", "b", "a"], "alike"));
        assert!(caught.is_err());
    }
}
