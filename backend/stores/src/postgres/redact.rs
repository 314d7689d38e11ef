//! Hiding the password of a PostgreSQL URL, for every log line and message
//! that names one.

/// `url` with the password hidden (`postgres://user:***@host/db`, and
/// `password=***` in its parameters), for logs and messages.
pub(crate) fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(start) = url.find("://").map(|at| at + 3) {
        let authority_end = url[start..].find(['/', '?']).map_or(url.len(), |end| start + end);
        if let Some(at) = url[start..authority_end].rfind('@').map(|at| start + at)
            && let Some(colon) = url[start..at].find(':').map(|colon| start + colon)
        {
            out = format!("{}***{}", &url[..=colon], &url[at..]);
        }
    }
    if let Some(query) = out.find('?') {
        let (head, params) = out.split_at(query + 1);
        let params: Vec<String> = params
            .split('&')
            .map(|param| if param.starts_with("password=") { "password=***".to_owned() } else { param.to_owned() })
            .collect();
        out = format!("{head}{}", params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn the_password_is_hidden_in_the_authority_and_the_parameters() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://u@h/db?password=secret&x=1"), "postgres://u@h/db?password=***&x=1");
        assert_eq!(redact("postgres://u:p%40ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }
}
