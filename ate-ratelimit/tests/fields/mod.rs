//! Reading the IETF `RateLimit-Policy` / `RateLimit` fields the layers
//! write, with a structured-field parser (`sfv`), as a client would.

/// The fields as an RFC 9651 parser reads them: (name, [(param, int)]).
pub(crate) fn parse_field(value: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{value:?}: {e}"));
    list.into_iter()
        .map(|entry| match entry {
            sfv::ListEntry::Item(item) => (
                item.bare_item.as_string().unwrap().as_str().to_owned(),
                item.params
                    .iter()
                    .map(|(k, v)| (k.as_str().to_owned(), i64::from(v.as_integer().unwrap())))
                    .collect(),
            ),
            other => panic!("not an item: {other:?}"),
        })
        .collect()
}
