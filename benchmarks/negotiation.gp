# Negotiation plot: gnuplot -e "csv='results/negotiation.csv'; png='results/negotiation.png'" negotiation.gp
# CSV (bench_negotiation): mode,ranks,tensors,capacity,step_ms,cycle_us,... grouped by mode,
# then ranks. Modes: cache (configured capacity), cache-fit (capacity >= tensors), no-cache.
set terminal pngcairo size 1400,600 font ",10" noenhanced
set output png
set datafile separator ","
set datafile columnheaders
set logscale xy 10
set autoscale xfix
set format y "%g"
set grid
set key top left font ",8"
set xlabel "tensors per step (1 float32 each)"
ranks = "2 4 8 16"
modes = "cache cache-fit no-cache"
dash(j) = j == 1 ? 1 : j == 2 ? 3 : 2
pick(col, m, r) = (strcol(1) eq m && column(2) == r) ? column(col) : NaN
set multiplot layout 1,2 title "negotiation scaling: ranks as threads, kolo on gloo (solid: cache, dotted: cache-fit, dashed: no-cache)"
set title "time per step"
set ylabel "ms per step"
plot for [j=1:words(modes)] for [i=1:words(ranks)] \
     csv using 3:(pick(5, word(modes, j), int(word(ranks, i)))) with linespoints \
     dashtype dash(j) lc i \
     title sprintf("%s ranks, %s", word(ranks, i), word(modes, j))
set title "time per coordination cycle"
set ylabel "microseconds per cycle"
plot for [j=1:words(modes)] for [i=1:words(ranks)] \
     csv using 3:(pick(6, word(modes, j), int(word(ranks, i)))) with linespoints \
     dashtype dash(j) lc i \
     title sprintf("%s ranks, %s", word(ranks, i), word(modes, j))
unset multiplot
