//! A check of a Parquet file's footer before polars decodes it.
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

use std::io::{Read, Seek, SeekFrom};

/// Nesting deeper than this is refused: the footer's real depth is at most six.
const MAX_DEPTH: usize = 64;

/// The structs of the footer that polars decodes field by field (others it skips).
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
    match want {
        Elem::Int => matches!(wire, I16 | I32 | I64),
        Elem::Binary => wire == BINARY,
        Elem::Struct(_) => wire == STRUCT,
    }
}

struct Walk<'a> {
    buf: &'a [u8],
    pos: usize,
}

type Res<T> = Result<T, String>;

impl Walk<'_> {
    fn byte(&mut self) -> Res<u8> {
        let b = *self.buf.get(self.pos).ok_or("the footer ends inside a value")?;
        self.pos += 1;
        Ok(b)
    }

    fn skip(&mut self, n: u64) -> Res<()> {
        let left = (self.buf.len() - self.pos) as u64;
        if n > left {
            return Err(format!("a value of {n} bytes where {left} are left in the footer"));
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
        let left = (self.buf.len() - self.pos) as u64;
        if n > left {
            return Err(format!("a list of {n} elements with {left} bytes left in the footer"));
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
            t => Err(format!("a {} where the footer holds none", wire_name(t))),
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
                    ((z >> 1) as i64 ^ -((z & 1) as i64)) as i16
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
                Some(Want::ListOf(elem)) => {
                    let (wire, n) = self.list_header()?;
                    if n > 0 && !elem_fits(elem, wire) {
                        return Err(format!("field {id} of {s:?} is sent as a list of {} where the format has {}", wire_name(wire), Want::ListOf(elem)));
                    }
                    let known = match elem {
                        Elem::Struct(k) => Some(k),
                        _ => None,
                    };
                    for _ in 0..n {
                        self.element(wire, known, depth)?;
                    }
                }
                Some(_) => self.value(wire, depth)?,
            }
        }
    }
}

/// Checks the footer of the Parquet file `f`: `Err` says what is malformed. A file too
/// short for a footer, or not ending in `PAR1`, passes: polars refuses it with its own
/// error.
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
    f.seek(SeekFrom::Start(0))?;
    Ok(Walk { buf: &buf, pos: 0 }.structure(Struct::FileMetaData, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(bytes: &[u8]) -> Res<()> {
        Walk { buf: bytes, pos: 0 }.structure(Struct::FileMetaData, 0)
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
}
