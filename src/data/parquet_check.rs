//! A check of a Parquet file's footer and page headers before polars decodes them.
//!
//! polars-parquet's footer decoder trusts the wire types of the fields it knows: a boolean
//! field (`Statistics.is_max_value_exact`, `SortingColumn.descending`, a timestamp's
//! `isAdjustedToUTC`, ...) sent with another type panics (`expect("thrift bool field")`),
//! and a list declaring two billion elements is given that capacity up front, which
//! aborts the process when the allocation fails; neither can be caught as an error. This
//! walk reads the footer as the Thrift compact protocol and the Parquet spec lay it out,
//! refusing a known field whose wire type is not the spec's, a list longer than the bytes
//! left, or nesting deeper than any writer produces. A footer that passes is one whose
//! decoding by polars follows the same path, so it cannot reach those panics.
//!
//! The page headers are walked the same way, column chunk by column chunk as polars'
//! page reader goes (from the chunk's first page until its pages hold the values the footer
//! declares): polars takes a data page's value count as a `usize`, so a negative one
//! becomes a reservation of 2.3 × 10¹⁸ bytes and the process aborts. A page whose counts
//! are negative or above its chunk's, or whose bytes run past its chunk, is refused.

use std::io::{Read, Seek, SeekFrom};

/// Nesting deeper than this is refused: the footer's real depth is at most six.
const MAX_DEPTH: usize = 64;

/// The structs of the footer and the page headers that polars decodes field by field
/// (others it skips).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Struct {
    FileMetaData,
    SchemaElement,
    LogicalType,
    Decimal,
    TimeType,
    TimeUnit,
    IntType,
    RowGroup,
    ColumnChunk,
    ColumnMetaData,
    Statistics,
    SortingColumn,
    KeyValue,
    ColumnOrder,
    PageHeader,
    DataPageHeader,
    DictionaryPageHeader,
    DataPageHeaderV2,
    /// A struct polars skips without looking at its fields.
    Any,
}

/// What the spec says a known field holds.
#[derive(Clone, Copy, Debug)]
enum Want {
    Bool,
    Byte,
    Int,
    Binary,
    Struct(Struct),
    ListOf(Elem),
}

#[derive(Clone, Copy, Debug)]
enum Elem {
    Int,
    Binary,
    Struct(Struct),
}

/// The spec's type of field `id` of `s`, for the fields polars reads; `None` for the ones
/// it skips by their wire type.
fn field(s: Struct, id: i16) -> Option<Want> {
    use Struct::*;
    use Want::{Binary, Bool, Byte, Int, ListOf};
    Some(match (s, id) {
        (FileMetaData, 1 | 3) => Int,
        (FileMetaData, 2) => ListOf(Elem::Struct(SchemaElement)),
        (FileMetaData, 4) => ListOf(Elem::Struct(RowGroup)),
        (FileMetaData, 5) => ListOf(Elem::Struct(KeyValue)),
        (FileMetaData, 6) => Binary,
        (FileMetaData, 7) => ListOf(Elem::Struct(ColumnOrder)),
        (SchemaElement, 1..=3 | 5..=9) => Int,
        (SchemaElement, 4) => Binary,
        (SchemaElement, 10) => Want::Struct(LogicalType),
        (LogicalType, 1..=4 | 6 | 11..=15) => Want::Struct(Any),
        (LogicalType, 5) => Want::Struct(Decimal),
        (LogicalType, 7 | 8) => Want::Struct(TimeType),
        (LogicalType, 10) => Want::Struct(IntType),
        (Decimal, 1 | 2) => Int,
        (TimeType, 1) => Bool,
        (TimeType, 2) => Want::Struct(TimeUnit),
        (TimeUnit, 1..=3) => Want::Struct(Any),
        (IntType, 1) => Byte,
        (IntType, 2) => Bool,
        (RowGroup, 1) => ListOf(Elem::Struct(ColumnChunk)),
        (RowGroup, 2 | 3 | 5..=7) => Int,
        (RowGroup, 4) => ListOf(Elem::Struct(SortingColumn)),
        (ColumnChunk, 1) => Binary,
        (ColumnChunk, 2 | 4..=7) => Int,
        (ColumnChunk, 3) => Want::Struct(ColumnMetaData),
        (ColumnMetaData, 1 | 4..=7 | 9..=11 | 14 | 15) => Int,
        (ColumnMetaData, 2) => ListOf(Elem::Int),
        (ColumnMetaData, 3) => ListOf(Elem::Binary),
        (ColumnMetaData, 12) => Want::Struct(Statistics),
        (Statistics, 1 | 2 | 5 | 6) => Binary,
        (Statistics, 3 | 4) => Int,
        (Statistics, 7 | 8) => Bool,
        (SortingColumn, 1) => Int,
        (SortingColumn, 2 | 3) => Bool,
        (KeyValue, 1 | 2) => Binary,
        (ColumnOrder, 1 | 2) => Want::Struct(Any),
        (PageHeader, 1..=4) => Int,
        (PageHeader, 5) => Want::Struct(DataPageHeader),
        (PageHeader, 6) => Want::Struct(Any),
        (PageHeader, 7) => Want::Struct(DictionaryPageHeader),
        (PageHeader, 8) => Want::Struct(DataPageHeaderV2),
        (DataPageHeader, 1..=4) => Int,
        (DataPageHeader, 5) | (DataPageHeaderV2, 8) => Want::Struct(Statistics),
        (DictionaryPageHeader, 1 | 2) => Int,
        (DictionaryPageHeader, 3) | (DataPageHeaderV2, 7) => Bool,
        (DataPageHeaderV2, 1..=6) => Int,
        _ => return None,
    })
}

// Compact-protocol wire types.
const STOP: u8 = 0;
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

fn wire_name(t: u8) -> &'static str {
    match t {
        TRUE | FALSE => "bool",
        BYTE => "byte",
        I16 => "i16",
        I32 => "i32",
        I64 => "i64",
        DOUBLE => "double",
        BINARY => "binary",
        LIST => "list",
        SET => "set",
        MAP => "map",
        STRUCT => "struct",
        _ => "unknown",
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Want::Bool => write!(f, "bool"),
            Want::Byte => write!(f, "byte"),
            Want::Int => write!(f, "integer"),
            Want::Binary => write!(f, "binary"),
            Want::Struct(s) => write!(f, "struct {s:?}"),
            Want::ListOf(Elem::Int) => write!(f, "list of integers"),
            Want::ListOf(Elem::Binary) => write!(f, "list of binaries"),
            Want::ListOf(Elem::Struct(s)) => write!(f, "list of {s:?}"),
        }
    }
}

fn fits(want: Want, wire: u8) -> bool {
    match want {
        Want::Bool => matches!(wire, TRUE | FALSE),
        Want::Byte => wire == BYTE,
        Want::Int => matches!(wire, I16 | I32 | I64),
        Want::Binary => wire == BINARY,
        Want::Struct(_) => wire == STRUCT,
        Want::ListOf(_) => wire == LIST,
    }
}

fn elem_fits(want: Elem, wire: u8) -> bool {
    let want = match want {
        Elem::Int => Want::Int,
        Elem::Binary => Want::Binary,
        Elem::Struct(s) => Want::Struct(s),
    };
    fits(want, wire)
}

/// What the page walk needs from a decoded struct, in the order read: where each known
/// struct starts, the value of each integer field of one, and where each element of a
/// list of binaries lies (a column's path).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Event {
    Start(Struct),
    Int(Struct, i16, i64),
    Bytes(Struct, i16, usize, usize),
}

/// A compact-protocol integer from its varint.
fn zigzag(z: u64) -> i64 {
    (z >> 1) as i64 ^ -((z & 1) as i64)
}

struct Walk<'a> {
    buf: &'a [u8],
    pos: usize,
    events: Vec<Event>,
    /// The bytes ran out before the value did (a page header read in part is read again
    /// with more).
    short: bool,
}

type Res<T> = Result<T, String>;

impl<'a> Walk<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Walk { buf, pos: 0, events: Vec::new(), short: false }
    }

    fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn byte(&mut self) -> Res<u8> {
        let Some(&b) = self.buf.get(self.pos) else {
            self.short = true;
            return Err("the bytes end inside a value".into());
        };
        self.pos += 1;
        Ok(b)
    }

    fn skip(&mut self, n: u64) -> Res<()> {
        let left = self.left();
        if n > left {
            self.short = true;
            return Err(format!("a value of {n} bytes where {left} are left"));
        }
        self.pos += n as usize;
        Ok(())
    }

    fn varint(&mut self) -> Res<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f).wrapping_shl(shift);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint longer than ten bytes".into())
    }

    /// A list header: its element type and a length no greater than the bytes left (a
    /// longer one is either false or a loop of billions of empty booleans).
    fn list_header(&mut self) -> Res<(u8, u64)> {
        let h = self.byte()?;
        let n = match h >> 4 {
            15 => self.varint()?,
            n => u64::from(n),
        };
        // polars reads the count as an i32 and takes a negative one as empty.
        let n = u64::try_from(n as i32).unwrap_or(0);
        let left = self.left();
        if n > left {
            self.short = true;
            return Err(format!("a list of {n} elements with {left} bytes left"));
        }
        Ok((h & 0x0f, n))
    }

    /// A value of wire type `wire`, consumed exactly as polars skips an unknown field (so
    /// that both read the next field from the same byte): a boolean, even as a list
    /// element, takes no byte; a set or a map is an error.
    fn value(&mut self, wire: u8, depth: usize) -> Res<()> {
        match wire {
            TRUE | FALSE => Ok(()),
            BYTE => self.skip(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.skip(8),
            BINARY => {
                let n = self.varint()?;
                self.skip(n)
            }
            LIST => {
                let (elem, n) = self.list_header()?;
                for _ in 0..n {
                    self.element(elem, None, depth)?;
                }
                Ok(())
            }
            STRUCT => self.structure(Struct::Any, depth + 1),
            t => Err(format!("a {}, which Parquet metadata never holds", wire_name(t))),
        }
    }

    /// A list element; a struct is walked as `known` says.
    fn element(&mut self, wire: u8, known: Option<Struct>, depth: usize) -> Res<()> {
        match wire {
            STRUCT => self.structure(known.unwrap_or(Struct::Any), depth + 1),
            t => self.value(t, depth),
        }
    }

    fn structure(&mut self, s: Struct, depth: usize) -> Res<()> {
        if depth > MAX_DEPTH {
            return Err(format!("structs nested more than {MAX_DEPTH} deep"));
        }
        if s != Struct::Any {
            self.events.push(Event::Start(s));
        }
        let mut last = 0i16;
        loop {
            let h = self.byte()?;
            let wire = h & 0x0f;
            if wire == STOP {
                return Ok(());
            }
            let id = match h >> 4 {
                0 => {
                    let z = self.varint()?;
                    zigzag(z) as i16
                }
                d => last.checked_add(i16::from(d)).ok_or("a field id past 32767")?,
            };
            last = id;
            match field(s, id) {
                None => self.value(wire, depth)?,
                Some(want) if !fits(want, wire) => {
                    return Err(format!("field {id} of {s:?} is sent as {} where the format has {want}", wire_name(wire)));
                }
                Some(Want::Struct(inner)) => self.structure(inner, depth + 1)?,
                Some(Want::Int) => {
                    let z = self.varint()?;
                    self.events.push(Event::Int(s, id, zigzag(z)));
                }
                Some(Want::ListOf(elem)) => {
                    let (wire, n) = self.list_header()?;
                    if n > 0 && !elem_fits(elem, wire) {
                        return Err(format!("field {id} of {s:?} is sent as a list of {} where the format has {}", wire_name(wire), Want::ListOf(elem)));
                    }
                    for _ in 0..n {
                        match elem {
                            Elem::Binary => {
                                let len = self.varint()?;
                                let start = self.pos;
                                self.skip(len)?;
                                self.events.push(Event::Bytes(s, id, start, self.pos));
                            }
                            Elem::Struct(k) => self.element(wire, Some(k), depth)?,
                            Elem::Int => self.element(wire, None, depth)?,
                        }
                    }
                }
                Some(_) => self.value(wire, depth)?,
            }
        }
    }
}

/// Checks the footer and the page headers of the Parquet file `f`: `Err` says what is
/// malformed and where. A file too short for a footer, or not ending in `PAR1`, passes:
/// polars refuses it with its own error.
pub(crate) fn check(f: &mut (impl Read + Seek)) -> std::io::Result<Result<(), String>> {
    let size = f.seek(SeekFrom::End(0))?;
    if size < 12 {
        return Ok(Ok(()));
    }
    let mut tail = [0u8; 8];
    f.seek(SeekFrom::End(-8))?;
    f.read_exact(&mut tail)?;
    if &tail[4..] != b"PAR1" {
        return Ok(Ok(()));
    }
    // polars decodes from the start of the metadata, with the 8-byte trailer after it.
    let len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]])) + 8;
    if len > size {
        return Ok(Ok(()));
    }
    let mut buf = Vec::new();
    f.seek(SeekFrom::End(-(len as i64)))?;
    f.take(len).read_to_end(&mut buf)?;
    let mut footer = Walk::new(&buf);
    if let Err(fault) = footer.structure(Struct::FileMetaData, 0) {
        return Ok(Err(format!("in its footer, {fault}")));
    }
    for c in chunks(&buf, &footer.events) {
        if let Err(fault) = pages(f, size - len, &c)? {
            let column = match c.path.is_empty() {
                true => format!("{} (from 0)", c.column),
                false => format!("`{}`", c.path.join(".")),
            };
            return Ok(Err(format!("in row group {}, column {column}, {fault}", c.row_group)));
        }
    }
    f.seek(SeekFrom::Start(0))?;
    Ok(Ok(()))
}

/// Where a column chunk's pages are and how many values they hold, as its footer entry
/// says.
#[derive(Debug, Default)]
struct Chunk {
    row_group: usize,
    /// Its row group's rows.
    rows: Option<i64>,
    column: usize,
    /// Its path in the schema: `close`, or `quote.close` in a nested column.
    path: Vec<String>,
    values: Option<i64>,
    size: Option<i64>,
    data_page: Option<i64>,
    dictionary_page: Option<i64>,
}

/// The column chunks of the walked footer `buf`.
fn chunks(buf: &[u8], events: &[Event]) -> Vec<Chunk> {
    let (mut out, mut row_group, mut column) = (Vec::<Chunk>::new(), None, 0);
    let mut rows = Vec::new();
    for e in events {
        match *e {
            // (A row group's row count may come before or after its columns.)
            Event::Int(Struct::RowGroup, 3, v) => rows.push((row_group.unwrap_or(0), v)),
            Event::Start(Struct::RowGroup) => {
                row_group = Some(row_group.map_or(0, |r: usize| r + 1));
                column = 0;
            }
            Event::Start(Struct::ColumnChunk) => {
                out.push(Chunk { row_group: row_group.unwrap_or(0), column, ..Chunk::default() });
                column += 1;
            }
            Event::Bytes(Struct::ColumnMetaData, 3, a, b) => {
                if let Some(c) = out.last_mut() {
                    c.path.push(String::from_utf8_lossy(&buf[a..b]).into_owned());
                }
            }
            Event::Int(Struct::ColumnMetaData, id, v) => {
                if let Some(c) = out.last_mut() {
                    match id {
                        5 => c.values = Some(v),
                        7 => c.size = Some(v),
                        9 => c.data_page = Some(v),
                        11 => c.dictionary_page = Some(v),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    for (g, n) in rows {
        out.iter_mut().filter(|c| c.row_group == g).for_each(|c| c.rows = Some(n));
    }
    out
}

/// Walks the page headers of column chunk `c` of a file whose pages end at `end` (where
/// its footer starts), as polars' page reader goes through them: from the dictionary page
/// (or the first data page) until the data pages hold the values the chunk declares.
fn pages(f: &mut (impl Read + Seek), end: u64, c: &Chunk) -> std::io::Result<Result<(), String>> {
    // A chunk without these polars refuses itself (they are required fields).
    let (Some(values), Some(size), Some(data_page)) = (c.values, c.size, c.data_page) else {
        return Ok(Ok(()));
    };
    // Every row has at least one value (a null is one) in every column.
    match c.rows {
        Some(rows) if values < rows => return Ok(Err(format!("the chunk declares {values} values for its row group's {rows} rows"))),
        _ if values < 0 => return Ok(Err(format!("the chunk declares {values} values"))),
        _ => {}
    }
    let start = c.dictionary_page.unwrap_or(data_page);
    let (Ok(start), Ok(size)) = (u64::try_from(start), u64::try_from(size)) else {
        return Ok(Err(format!("the chunk starts at byte {start} and is {size} bytes long")));
    };
    let chunk_end = match start.checked_add(size) {
        Some(e) if e <= end => e,
        _ => return Ok(Err(format!("the chunk of {size} bytes at byte {start} runs past byte {end}, where the footer starts"))),
    };
    let (mut pos, mut seen) = (start, 0i64);
    let mut buf = Vec::new();
    while seen < values {
        if pos >= chunk_end {
            return Ok(Err(format!("the pages hold {seen} of the {values} values the chunk declares")));
        }
        // Most headers are a few dozen bytes; one with large statistics is read again whole.
        let mut want = 4096u64;
        let page = loop {
            let n = want.min(chunk_end - pos);
            f.seek(SeekFrom::Start(pos))?;
            buf.clear();
            f.by_ref().take(n).read_to_end(&mut buf)?;
            let mut w = Walk::new(&buf);
            match w.structure(Struct::PageHeader, 0) {
                Ok(()) => break Page::of(&w.events).map(|p| (p, w.pos as u64)),
                Err(_) if w.short && n < chunk_end - pos => want = want.saturating_mul(16),
                Err(fault) => break Err(fault),
            }
        };
        let (page, header) = match page {
            Ok(p) => p,
            Err(fault) => return Ok(Err(format!("the page header at byte {pos}: {fault}"))),
        };
        if page.values > values {
            return Ok(Err(format!("the page at byte {pos} holds {} values, its chunk {values}", page.values)));
        }
        seen = seen.saturating_add(page.values);
        let data = pos + header;
        if page.size > chunk_end - data {
            return Ok(Err(format!("the page at byte {pos} runs {} bytes past its chunk", page.size - (chunk_end - data))));
        }
        pos = data + page.size;
    }
    Ok(Ok(()))
}

/// What polars takes from a page header: the values it holds (none for a dictionary or an
/// index page) and the bytes that follow it.
struct Page {
    values: i64,
    size: u64,
}

impl Page {
    fn of(events: &[Event]) -> Res<Page> {
        let int = |s: Struct, id: i16| {
            events.iter().find_map(|e| match *e {
                Event::Int(t, i, v) if t == s && i == id => Some(v),
                _ => None,
            })
        };
        // Every count and size is an i32 that polars casts to a usize.
        let count = |what: &str, v: Option<i64>| match v {
            Some(v) if !(0..=i64::from(i32::MAX)).contains(&v) => Err(format!("{what} of {v}")),
            v => Ok(v.unwrap_or(0)),
        };
        let kind = int(Struct::PageHeader, 1).ok_or("no page type")?;
        count("an uncompressed size", int(Struct::PageHeader, 2))?;
        let size = count("a compressed size", int(Struct::PageHeader, 3))? as u64;
        count("a dictionary value count", int(Struct::DictionaryPageHeader, 1))?;
        let values = match kind {
            0 => count("a value count", int(Struct::DataPageHeader, 1))?,
            3 => {
                count("a null count", int(Struct::DataPageHeaderV2, 2))?;
                count("a row count", int(Struct::DataPageHeaderV2, 3))?;
                count("a definition level length", int(Struct::DataPageHeaderV2, 5))?;
                count("a repetition level length", int(Struct::DataPageHeaderV2, 6))?;
                count("a value count", int(Struct::DataPageHeaderV2, 1))?
            }
            _ => 0,
        };
        Ok(Page { values, size })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(bytes: &[u8]) -> Res<()> {
        Walk::new(bytes).structure(Struct::FileMetaData, 0)
    }

    #[test]
    fn a_written_footer_passes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/sp500_sample.parquet");
        let mut f = std::fs::File::open(path).expect("the sample");
        assert_eq!(check(&mut f).expect("readable"), Ok(()));
    }

    #[test]
    fn wrong_wire_types_and_long_lists_are_refused() {
        // FileMetaData.version = 1 (i32), then stop.
        assert_eq!(walk(&[0x15, 0x02, 0x00]), Ok(()));
        // FileMetaData.version sent as a binary.
        assert!(walk(&[0x18, 0x00, 0x00]).unwrap_err().contains("field 1 of FileMetaData is sent as binary where the format has integer"));
        // row_groups[0].sorting_columns[0].descending sent as an i32: polars panics on it.
        let sorting = [0x49, 0x1c, 0x49, 0x1c, 0x15, 0x00, 0x15, 0x02, 0x00, 0x00, 0x00];
        assert!(walk(&sorting).unwrap_err().contains("field 2 of SortingColumn is sent as i32 where the format has bool"));
        // A schema list declaring 2^31-1 elements in a 9-byte footer.
        let long = [0x29, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00, 0x00];
        assert!(walk(&long).unwrap_err().contains("a list of 2147483647 elements"));
        // Unknown fields (ids 50, 51, 52) are skipped by wire type: a binary, a double, a
        // list of two i32s; a map is refused (polars cannot skip one).
        let unknown = [0x08, 0x64, 0x00, 0x07, 0x66, 0, 0, 0, 0, 0, 0, 0, 0, 0x09, 0x68, 0x25, 0x02, 0x04, 0x00];
        assert_eq!(walk(&unknown), Ok(()));
        assert!(walk(&[0x0b, 0x64, 0x00, 0x00]).unwrap_err().contains("a map"));
        // Nesting past the bound, through unknown struct fields.
        let mut deep = vec![0x0c, 0x64];
        deep.extend(std::iter::repeat_n(0x1c, 100));
        assert!(walk(&deep).unwrap_err().contains("nested more than"));
    }

    /// A V1 data page header: type 0, both sizes `size`, `values` values (zigzag varints).
    fn data_page(values: i64, size: i64) -> Vec<u8> {
        let z = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        let int = |out: &mut Vec<u8>, head: u8, v: i64| {
            out.push(head);
            let mut z = z(v);
            while z >= 0x80 {
                out.push(z as u8 | 0x80);
                z >>= 7;
            }
            out.push(z as u8);
        };
        int(&mut out, 0x15, 0);
        int(&mut out, 0x15, size);
        int(&mut out, 0x15, size);
        out.push(0x2c); // field 5, the DataPageHeader
        int(&mut out, 0x15, values);
        for _ in 0..3 {
            int(&mut out, 0x15, 0);
        }
        out.extend([0, 0]);
        out
    }

    fn chunk_of(file: &[u8], values: i64) -> Res<()> {
        let c = Chunk { values: Some(values), size: Some(file.len() as i64), data_page: Some(0), ..Chunk::default() };
        pages(&mut std::io::Cursor::new(file), file.len() as u64, &c).expect("in memory")
    }

    #[test]
    fn page_counts_and_sizes_are_checked_against_the_chunk() {
        // Two pages of 3 and 2 values, 4 data bytes each: the chunk's 5 values.
        let mut file = data_page(3, 4);
        file.extend([0; 4]);
        file.extend(data_page(2, 4));
        file.extend([0; 4]);
        assert_eq!(chunk_of(&file, 5), Ok(()));
        // The chunk declares 6: its pages end with 5.
        assert!(chunk_of(&file, 6).unwrap_err().contains("the pages hold 5 of the 6 values"));
        // A negative count (polars would reserve 2.3e18 bytes for it) or one above the chunk's.
        assert!(chunk_of(&data_page(-1, 0), 1).unwrap_err().contains("a value count of -1"));
        assert!(chunk_of(&data_page(7, 0), 5).unwrap_err().contains("holds 7 values, its chunk 5"));
        // A chunk declaring fewer values than its row group's rows, or a negative number.
        let c = Chunk { rows: Some(6), values: Some(5), size: Some(file.len() as i64), data_page: Some(0), ..Chunk::default() };
        let under = pages(&mut std::io::Cursor::new(&file), file.len() as u64, &c).expect("in memory");
        assert!(under.unwrap_err().contains("the chunk declares 5 values for its row group's 6 rows"));
        assert!(chunk_of(&file, -47).unwrap_err().contains("the chunk declares -47 values"));
        // A page whose data runs past the chunk.
        let mut short = data_page(1, 10);
        short.extend([0; 4]);
        assert!(chunk_of(&short, 1).unwrap_err().contains("runs 6 bytes past its chunk"));
        // A header with a boolean field sent as an i32 (DictionaryPageHeader.is_sorted).
        let dict = [0x15, 0x04, 0x15, 0x00, 0x15, 0x00, 0x4c, 0x15, 0x00, 0x15, 0x00, 0x15, 0x02, 0x00, 0x00];
        assert!(chunk_of(&dict, 1).unwrap_err().contains("field 3 of DictionaryPageHeader is sent as i32 where the format has bool"));
    }
}
