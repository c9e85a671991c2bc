//! # keel-macros
//!
//! The attribute behind `#[keel_core::middleware]` and `#[keel::middleware]`: put on an
//! `impl Middleware for X { ... }` block, it writes `fn hooks()` with exactly the hooks
//! the block defines and applies `#[async_trait]`. Depend on `keel-core` or `keel` and
//! use their re-export: a procedural macro cannot name its own crate's paths, so each
//! re-export here emits the paths of the crate that re-exports it.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::{ImplItem, ItemImpl, parse_macro_input};

/// The six hooks, in the order `Hooks::__implemented` takes them.
const HOOKS: [&str; 6] = [
    "before_agent",
    "before_model",
    "wrap_model_call",
    "after_model",
    "wrap_tool_call",
    "after_agent",
];

/// `#[keel_core::middleware]`: the attribute as keel-core re-exports it (its expansion
/// names `::keel_core`). See keel-core's `Middleware` documentation.
#[proc_macro_attribute]
pub fn core_middleware(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(args, item, "keel_core")
}

/// `#[keel::middleware]`: the attribute as the `keel` facade re-exports it (its
/// expansion names `::keel`). See keel-core's `Middleware` documentation.
#[proc_macro_attribute]
pub fn facade_middleware(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(args, item, "keel")
}

fn expand(args: TokenStream, item: TokenStream, krate: &str) -> TokenStream {
    let attr = format!("#[{krate}::middleware]");
    if let Some(arg) = TokenStream2::from(args).into_iter().next() {
        let message = format!("{attr} takes no arguments");
        return syn::Error::new(arg.span(), message)
            .to_compile_error()
            .into();
    }
    let block = parse_macro_input!(item as ItemImpl);
    match derive_hooks(block, &attr, krate) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

/// The impl block with `fn hooks()` added and `#[async_trait]` applied, or why not.
fn derive_hooks(mut block: ItemImpl, attr: &str, krate: &str) -> syn::Result<TokenStream2> {
    if block.trait_.is_none() {
        let message = format!("{attr} goes on an `impl Middleware for Type {{ ... }}` block");
        return Err(syn::Error::new_spanned(&block.self_ty, message));
    }
    if let Some(a) = block.attrs.iter().find(|a| is_async_trait(a.path())) {
        let message = format!("remove #[async_trait]: {attr} applies it");
        return Err(syn::Error::new_spanned(a, message));
    }
    let mut implemented = [false; 6];
    for item in &block.items {
        match item {
            ImplItem::Fn(f) if f.sig.ident == "hooks" => {
                let message = format!(
                    "{attr} writes `fn hooks` from the hooks this block defines: remove this one"
                );
                return Err(syn::Error::new_spanned(&f.sig.ident, message));
            }
            ImplItem::Fn(f) => {
                if let Some(i) = HOOKS.iter().position(|h| f.sig.ident == h) {
                    implemented[i] = true;
                }
            }
            ImplItem::Macro(m) => {
                let message = format!(
                    "{attr} cannot see the hooks a macro call defines: write the hooks out, or use #[async_trait] alone (every hook is then called)"
                );
                return Err(syn::Error::new_spanned(&m.mac, message));
            }
            _ => {}
        }
    }
    let private = syn::Ident::new(krate, Span::call_site());
    let private = quote!(::#private::__private);
    let [a, b, c, d, e, f] = implemented;
    block.items.push(syn::parse_quote! {
        #[inline]
        fn hooks(&self) -> #private::Hooks {
            #private::Hooks::__implemented(#a, #b, #c, #d, #e, #f)
        }
    });
    Ok(quote! {
        #[#private::async_trait]
        #block
    })
}

/// `async_trait` or `async_trait::async_trait` (or any path ending so).
fn is_async_trait(path: &syn::Path) -> bool {
    path.segments
        .last()
        .is_some_and(|s| s.ident == "async_trait")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(block: ItemImpl) -> Result<String, String> {
        derive_hooks(block, "#[keel_core::middleware]", "keel_core")
            .map(|t| t.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_mask_lists_the_hooks_the_block_defines_in_order() {
        let out = expand(syn::parse_quote! {
            impl Middleware for M {
                fn name(&self) -> &str { "M" }
                async fn after_agent(&self) {}
                async fn before_model(&self) {}
            }
        });
        let out = out.unwrap_or_default().replace(' ', "");
        assert!(
            out.starts_with("#[::keel_core::__private::async_trait]"),
            "{out}"
        );
        assert!(
            out.contains("Hooks::__implemented(false,true,false,false,false,true)"),
            "{out}"
        );
    }

    #[test]
    fn a_hand_written_hooks_is_refused() {
        let err = expand(syn::parse_quote! {
            impl Middleware for M {
                fn name(&self) -> &str { "M" }
                fn hooks(&self) -> Hooks { Hooks::ALL }
            }
        });
        assert_eq!(
            err,
            Err("#[keel_core::middleware] writes `fn hooks` from the hooks this block defines: remove this one".into())
        );
    }

    #[test]
    fn async_trait_macro_calls_and_inherent_impls_are_refused() {
        let twice = expand(syn::parse_quote! {
            #[async_trait]
            impl Middleware for M {}
        });
        assert_eq!(
            twice,
            Err("remove #[async_trait]: #[keel_core::middleware] applies it".into())
        );
        let hidden = expand(syn::parse_quote! {
            impl Middleware for M {
                hooks_from_a_macro!();
            }
        });
        assert!(hidden.is_err_and(|e| e.contains("cannot see the hooks a macro call defines")));
        let inherent = expand(syn::parse_quote! {
            impl M {}
        });
        assert!(inherent.is_err_and(|e| e.contains("goes on an `impl Middleware for Type")));
    }
}
