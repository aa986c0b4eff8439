//! Drawing on a [`Canvas`]: box outlines, filled discs, text in the 8x8 bitmap font
//! (`font8x8`, ASCII; other characters print as `?`) and masks tinted by id. Everything is
//! clipped to the canvas, so boxes half outside the frame, or labels past its edge, are drawn
//! in part and never index outside it.

use super::canvas::Canvas;

/// Side of a glyph of the bitmap font, pixels (at scale 1).
pub const GLYPH: i64 = 8;

/// Outlines the box of columns `x0..=x1`, rows `y0..=y1` (inclusive pixel bounds) with lines
/// `thickness` pixels wide, drawn inward from the bounds (so a box's edge pixels are its
/// bounds, whatever the thickness).
pub fn outline(c: &mut Canvas, (x0, y0): (i64, i64), (x1, y1): (i64, i64), thickness: i64, colour: [u8; 3]) {
    if x1 < x0 || y1 < y0 {
        return;
    }
    let t = thickness.max(1);
    c.fill((x0, y0), (x1 + 1, (y0 + t).min(y1 + 1)), colour, 256);
    c.fill((x0, (y1 + 1 - t).max(y0)), (x1 + 1, y1 + 1), colour, 256);
    c.fill((x0, y0), ((x0 + t).min(x1 + 1), y1 + 1), colour, 256);
    c.fill(((x1 + 1 - t).max(x0), y0), (x1 + 1, y1 + 1), colour, 256);
}

/// A filled disc of radius `r` around pixel `(cx, cy)`.
pub fn disc(c: &mut Canvas, (cx, cy): (i64, i64), r: i64, colour: [u8; 3]) {
    for dy in -r..=r {
        // The widest run of this row inside the circle.
        let half = ((r * r - dy * dy) as f64).sqrt() as i64;
        c.fill((cx - half, cy + dy), (cx + half + 1, cy + dy + 1), colour, 256);
    }
}

/// The width and height of `text` at `scale`, pixels (with one pixel of margin all round).
pub fn text_size(text: &str, scale: i64) -> (i64, i64) {
    (text.chars().count() as i64 * GLYPH * scale + 2, GLYPH * scale + 2)
}

/// Writes `text` with its top-left corner at `(x, y)`: `fg` glyphs on a `bg` box of
/// [`text_size`], each font pixel `scale` x `scale` canvas pixels.
pub fn text(c: &mut Canvas, (x, y): (i64, i64), text: &str, scale: i64, fg: [u8; 3], bg: [u8; 3]) {
    let s = scale.max(1);
    let (w, h) = text_size(text, s);
    c.fill((x, y), (x + w, y + h), bg, 256);
    for (i, ch) in text.chars().enumerate() {
        let glyph = font8x8::legacy::BASIC_LEGACY.get(ch as usize).copied().unwrap_or(font8x8::legacy::BASIC_LEGACY[b'?' as usize]);
        let left = x + 1 + i as i64 * GLYPH * s;
        for (row, bits) in glyph.iter().enumerate() {
            for col in 0..GLYPH {
                // Bit 0 is the glyph's leftmost pixel.
                if bits & (1 << col) != 0 {
                    let (px, py) = (left + col * s, y + 1 + row as i64 * s);
                    c.fill((px, py), (px + s, py + s), fg, 256);
                }
            }
        }
    }
}

/// Tints the canvas where `ids` (one byte a canvas pixel, row-major; 0: nothing) is non-zero:
/// `colour_of(id)` mixed in at `alpha` of 256. A map of another size than the canvas is left
/// alone (false).
pub fn tint(c: &mut Canvas, ids: &[u8], alpha: u16, colour_of: impl Fn(u8) -> [u8; 3]) -> bool {
    if ids.len() != c.width as usize * c.height as usize {
        return false;
    }
    for (i, &id) in ids.iter().enumerate() {
        if id != 0 {
            c.blend_at(i, colour_of(id), alpha);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const RED: [u8; 3] = [255, 0, 0];
    const BLACK: [u8; 3] = [0, 0, 0];

    #[test]
    fn outline_paints_exactly_the_bounds_band() {
        let mut c = Canvas::filled(20, 20, BLACK);
        outline(&mut c, (4, 5), (12, 15), 2, RED);
        for y in 0..20 {
            for x in 0..20 {
                let inside_outer = (4..=12).contains(&x) && (5..=15).contains(&y);
                let inside_inner = (6..=10).contains(&x) && (7..=13).contains(&y);
                let want = if inside_outer && !inside_inner { RED } else { BLACK };
                assert_eq!(c.pixel(x, y), Some(want), "({x}, {y})");
            }
        }
        // Partly outside the canvas: clipped, no panic; only its bottom band (rows 1..=3) shows.
        outline(&mut c, (-10, -10), (30, 3), 3, RED);
        assert_eq!((c.pixel(0, 0), c.pixel(19, 1), c.pixel(0, 3)), (Some(BLACK), Some(RED), Some(RED)));
    }

    #[test]
    fn text_draws_the_fonts_glyph_on_its_background() {
        let mut c = Canvas::filled(30, 12, BLACK);
        text(&mut c, (2, 1), "I", 1, RED, [0, 0, 255]);
        // The glyph box is 10x10 from (2, 1); font8x8's 'I' has its top row 0x1E (columns 1..=4).
        assert_eq!(c.pixel(2, 1), Some([0, 0, 255]), "the margin is background");
        let top = font8x8::legacy::BASIC_LEGACY[b'I' as usize][0];
        for col in 0..8 {
            let want = if top & (1 << col) != 0 { RED } else { [0, 0, 255] };
            assert_eq!(c.pixel(3 + col, 2), Some(want), "column {col}");
        }
        assert_eq!(c.pixel(12, 5), Some(BLACK), "nothing past the box");
        assert_eq!(text_size("ab", 2), (34, 18));
    }

    #[test]
    fn tint_mixes_only_where_the_map_has_an_id() {
        let mut c = Canvas::filled(2, 2, BLACK);
        assert!(tint(&mut c, &[0, 1, 0, 2], 128, |id| if id == 1 { RED } else { [0, 200, 0] }));
        assert_eq!(c.rgb, [0, 0, 0, 127, 0, 0, 0, 0, 0, 0, 100, 0]);
        assert!(!tint(&mut c, &[1; 3], 128, |_| RED), "a map of another size");
    }

    #[test]
    fn disc_is_round_and_clipped() {
        let mut c = Canvas::filled(9, 9, BLACK);
        disc(&mut c, (4, 4), 2, RED);
        assert_eq!(c.pixel(4, 2), Some(RED));
        assert_eq!(c.pixel(6, 4), Some(RED));
        assert_eq!(c.pixel(6, 6), Some(BLACK), "the corner of the square is outside the circle");
        disc(&mut c, (0, 0), 3, RED);
        assert_eq!(c.pixel(0, 0), Some(RED));
    }
}
