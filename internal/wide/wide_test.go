package wide

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

func TestAgainstBigInt(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64N(1000)
		case 1:
			return rng.Int64N(1 << 40)
		case 2:
			return math.MaxInt64 - rng.Int64N(1000)
		}
		return rng.Int64()
	}
	sat := func(x *big.Int) int64 {
		if x.Cmp(big.NewInt(math.MaxInt64)) > 0 {
			return math.MaxInt64
		}
		return x.Int64()
	}
	for range 100000 {
		a, b, c, d := pick(), pick(), pick()+1, pick()
		if c <= 0 {
			c = 1
		}
		ab := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		q, r := new(big.Int).QuoRem(ab, big.NewInt(c), new(big.Int))
		if got, want := MulDivFloor(a, b, c), sat(q); got != want {
			t.Fatalf("MulDivFloor(%d, %d, %d) = %d, want %d", a, b, c, got, want)
		}
		if r.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		if got, want := MulDivCeil(a, b, c), sat(q); got != want {
			t.Fatalf("MulDivCeil(%d, %d, %d) = %d, want %d", a, b, c, got, want)
		}
		cd := new(big.Int).Mul(big.NewInt(c), big.NewInt(d))
		if got, want := MulLE(a, b, c, d), ab.Cmp(cd) <= 0; got != want {
			t.Fatalf("MulLE(%d, %d, %d, %d) = %v, want %v", a, b, c, d, got, want)
		}
		if got, want := Mul(a, b), sat(ab); got != want {
			t.Fatalf("Mul(%d, %d) = %d, want %d", a, b, got, want)
		}
		if got, want := Add(a, b), sat(new(big.Int).Add(big.NewInt(a), big.NewInt(b))); got != want {
			t.Fatalf("Add(%d, %d) = %d, want %d", a, b, got, want)
		}
	}
}

func TestEdgeCases(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b, c     int64
		floor, ceil int64
	}{
		{7, 3, 2, 10, 11},
		{0, 5, 3, 0, 0},
		{1_000_000_000, int64(366 * 24 * time.Hour), 1, math.MaxInt64, math.MaxInt64},
		{1 << 62, 1 << 40, 1 << 45, 1 << 57, 1 << 57},
		{1 << 62, 3, 1 << 1, 3 << 61, 3 << 61},
		{math.MaxInt64, 2, 1, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64, 1, 1, math.MaxInt64, math.MaxInt64},
	} {
		if got := MulDivFloor(c.a, c.b, c.c); got != c.floor {
			t.Errorf("MulDivFloor(%d, %d, %d) = %d, want %d", c.a, c.b, c.c, got, c.floor)
		}
		if got := MulDivCeil(c.a, c.b, c.c); got != c.ceil {
			t.Errorf("MulDivCeil(%d, %d, %d) = %d, want %d", c.a, c.b, c.c, got, c.ceil)
		}
	}
	if !MulLE(1<<62, 1<<40, 1<<41, 1<<61) || MulLE(1<<62, 1<<40+1, 1<<41, 1<<61) {
		t.Errorf("MulLE is wrong at 2^102")
	}
}
