package files

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestDeletedFileStillACursor: the common "list a page, delete each file,
// list the next page" loop. The cursor names a file deleted (or expired and
// swept) since, and must still place the next page, for CursorRetention;
// another owner's id, live or deleted, is refused like an unknown one.
func TestDeletedFileStillACursor(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clk.Now})
	var want []string // newest first
	for range 7 {
		want = append([]string{mustCreate(t, s, "a", File{Filename: "f.txt", Purpose: PurposeUserData}, "x").ID}, want...)
		clk.Advance(time.Second)
	}

	// List, then delete each file of the page, then ask for the next page.
	var seen []string
	q := ListQuery{Limit: 3}
	for {
		page, more, err := s.List(ctx, "a", q)
		if err != nil {
			t.Fatalf("List(after %q) after deleting the previous page: %v", q.After, err)
		}
		for _, f := range page {
			seen = append(seen, f.ID)
			if err := s.Delete(ctx, "a", f.ID); err != nil {
				t.Fatal(err)
			}
		}
		if !more {
			break
		}
		q.After = page[len(page)-1].ID
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("list-and-delete loop saw %v, want %v", seen, want)
	}
	// Deleted files are gone everywhere else.
	if _, err := s.Get(ctx, "a", want[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a deleted file = %v, want ErrNotFound", err)
	}
	if page, _, err := s.List(ctx, "a", ListQuery{}); err != nil || len(page) != 0 {
		t.Fatalf("List after deleting everything = %d files, %v", len(page), err)
	}

	// An expired file, swept or not, is a cursor too.
	e1 := mustCreate(t, s, "a", File{Filename: "e.txt", Purpose: PurposeUserData, ExpiresAt: clk.Now().Add(time.Hour)}, "x")
	clk.Advance(time.Second)
	e2 := mustCreate(t, s, "a", File{Filename: "e.txt", Purpose: PurposeUserData}, "x")
	clk.Advance(2 * time.Hour)
	for _, sweep := range []bool{false, true} {
		if sweep {
			if n, err := s.Sweep(ctx, clk.Now()); err != nil || n != 1 {
				t.Fatalf("Sweep = %d, %v", n, err)
			}
		}
		page, _, err := s.List(ctx, "a", ListQuery{Order: OrderAsc, After: e1.ID})
		if err != nil || len(page) != 1 || page[0].ID != e2.ID {
			t.Fatalf("List(after an expired file, swept %v) = %v, %v", sweep, page, err)
		}
	}

	// Another owner's ids, live or deleted, are unknown cursors.
	bLive := mustCreate(t, s, "b", File{Filename: "b.txt", Purpose: PurposeUserData}, "x")
	bGone := mustCreate(t, s, "b", File{Filename: "b.txt", Purpose: PurposeUserData}, "x")
	if err := s.Delete(ctx, "b", bGone.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{bLive.ID, bGone.ID, "file-" + "zzzzzzzzzzzzzzzzzzzzzzzz"} {
		_, _, err := s.List(ctx, "a", ListQuery{After: id})
		var inv *invalidError
		if !errors.As(err, &inv) || inv.param != "after" || inv.msg != "No such File object: "+id {
			t.Errorf("List(after %s) = %v, want the unknown-cursor error", id, err)
		}
	}

	// After CursorRetention the tombstones go, and with them the cursors.
	clk.Advance(CursorRetention)
	if _, err := s.Sweep(ctx, clk.Now()); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := sqliteDB(s).QueryRowContext(ctx, `SELECT count(*) FROM file_tombstones`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d tombstones left after CursorRetention, %v", left, err)
	}
	if _, _, err := s.List(ctx, "a", ListQuery{After: want[0]}); !errors.Is(err, ErrInvalid) {
		t.Errorf("List(after a file deleted longer ago than CursorRetention) = %v, want invalid", err)
	}
}
