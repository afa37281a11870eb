//! memcached's error lines, each written once. Every reply that reports an error takes its
//! words from here, so a client sees exactly what memcached 1.6 would send.

pub const ERROR: &str = "ERROR";
pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
pub const BAD_COMMAND_LINE: &str = "CLIENT_ERROR bad command line";
pub const BAD_DATA_CHUNK: &str = "CLIENT_ERROR bad data chunk";
pub const BAD_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument";
pub const BAD_DELTA: &str = "CLIENT_ERROR invalid numeric delta argument";
pub const DELETE_USAGE: &str =
    "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]";
pub const NON_NUMERIC: &str = "CLIENT_ERROR cannot increment or decrement non-numeric value";
pub const TOO_LARGE: &str = "SERVER_ERROR object too large for cache";
pub const OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory storing object";
/// incr, decr and `ma` whose new number needed an item memcached could not allocate.
pub const ARITH_OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory";
pub const GET_OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory writing get response";
/// memcached's words when it cannot grow its read buffer for a request (a multiget line).
pub const READ_OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory reading request";
pub const UNEXPECTED: &str = "SERVER_ERROR unexpected engine response";
pub const ILLEGAL_SLAB: &str = "CLIENT_ERROR Illegal slab id";

/// memcached's error line for an engine result that is a failure (or, for a result a
/// command cannot produce, a server error rather than silence).
pub fn for_response(r: &hkv_types::Response) -> &'static str {
    use hkv_types::Response;
    match r {
        Response::NonNumeric => NON_NUMERIC,
        Response::TooLarge => TOO_LARGE,
        Response::OutOfMemory => OUT_OF_MEMORY,
        Response::KeyTooLong => BAD_FORMAT,
        // Only reads are deferred, and a pass stops its client before the first of them.
        Response::Deferred => GET_OUT_OF_MEMORY,
        Response::Vector(e) => vector::for_error(*e),
        _ => UNEXPECTED,
    }
}

/// Meta commands.
pub mod meta {
    pub const DUPLICATE_FLAG: &str = "CLIENT_ERROR duplicate flag";
    pub const INVALID_FLAG: &str = "CLIENT_ERROR invalid flag";
    pub const INVALID_OR_DUPLICATE: &str = "CLIENT_ERROR invalid or duplicate flag";
    pub const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format";
    pub const M_LENGTH: &str = "CLIENT_ERROR incorrect length for M token";
    pub const BAD_INITIAL: &str = "CLIENT_ERROR invalid numeric initial value";
    pub const BAD_DELTA: &str = "CLIENT_ERROR invalid numeric delta value";
    pub const MG_TOO_MANY_FLAGS: &str = "CLIENT_ERROR options flags are too long";
    pub const TOO_MANY_FLAGS: &str = "CLIENT_ERROR options flags too long";
    pub const OPAQUE_TOO_LONG: &str = "CLIENT_ERROR opaque token too long";
    pub const MS_MODE: &str = "CLIENT_ERROR invalid mode for ms M token";
    pub const MA_MODE: &str = "CLIENT_ERROR invalid mode for ma M token";
    pub const BAD_KEY: &str = "CLIENT_ERROR error decoding key";
}

/// Administrative commands.
pub mod admin {
    pub const SHUTDOWN_DISABLED: &str = "ERROR: shutdown not enabled";
    pub const SHUTDOWN_BAD_MODE: &str = "CLIENT_ERROR invalid shutdown mode";
    pub const DETAIL_USAGE: &str = "CLIENT_ERROR usage: stats detail on|off|dump";
    pub const MEMLIMIT_TOO_SMALL: &str = "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m";
    pub const MEMLIMIT_NOT_BYTES: &str =
        "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes";
    /// memcached's answer when its memory was preallocated (`-L`) and the limit would rise
    /// past it; hkv's arena is always reserved at start.
    pub const MEMLIMIT_ADJUST_FAILED: &str =
        "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust";
    pub const BAD_CLASS_ID: &str = "BADCLASS invalid class id";
    /// A crawl or metadump whose list named no class (`lru_crawler crawl ,`).
    pub const CRAWLER_NOT_STARTED: &str = "NOTSTARTED no items to crawl";
    pub const CRAWLER_DISABLED: &str = "CLIENT_ERROR lru crawler disabled";
    pub const CRAWLER_SLEEP: &str = "CLIENT_ERROR sleep must be one second or less";
    pub const CRAWLER_START_FAILED: &str = "ERROR failed to start lru crawler thread";
    /// With `-F` (memcached's wording).
    pub const FLUSH_DISABLED: &str = "CLIENT_ERROR flush_all not allowed";
    /// With `-X`.
    pub const CACHEDUMP_DISABLED: &str = "CLIENT_ERROR stats cachedump not allowed";
    pub const METADUMP_DISABLED: &str = "ERROR metadump not allowed";
    pub const METADUMP_PIPELINED: &str = "ERROR cannot pipeline other commands before metadump";
    pub const WATCH_PIPELINED: &str = "ERROR cannot pipeline other commands before watch";
    pub const CRAWLER_BUSY: &str = "BUSY currently processing crawler request";
    pub const STATS_OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory writing stats";
    /// `refresh_certs` without `-Z` (memcached's wording, capitals included).
    pub const TLS_NOT_ENABLED: &str = "Error TLS not enabled";
}

/// hkv's vector commands (docs/protocol-extensions.md).
pub mod vector {
    pub const UNKNOWN_TYPE: &str = "CLIENT_ERROR unknown element type";
    pub const UNKNOWN_OP: &str = "CLIENT_ERROR unknown operation";
    pub const FLOAT_BITWISE: &str = "CLIENT_ERROR bitwise operation on a float type";
    pub const BAD_SCALAR: &str = "CLIENT_ERROR scalar does not fit the element type";
    pub const VECTOR_NOT_MULTIPLE: &str =
        "CLIENT_ERROR vector length is not a multiple of the element size";
    pub const NOT_MULTIPLE: &str =
        "CLIENT_ERROR value length is not a multiple of the element size";
    pub const VECTOR_LENGTH: &str = "CLIENT_ERROR vector length differs from the value length";
    pub const EMPTY: &str = "CLIENT_ERROR empty value";

    /// The reason a client reads for an engine refusal.
    pub fn for_error(e: hkv_types::VectorError) -> &'static str {
        use hkv_types::VectorError;
        match e {
            VectorError::NotMultiple => NOT_MULTIPLE,
            VectorError::VectorLength => VECTOR_LENGTH,
            VectorError::Empty => EMPTY,
            VectorError::Unsupported => FLOAT_BITWISE,
        }
    }
}
