# Hierarchical vs flat plot: gnuplot -e "csv='results/hierarchical.csv'; png='results/hierarchical.png'" hierarchical.gp
# CSV (bench_hierarchical): set,megabytes,ranks,hosts,trials,hierarchical_s,flat_s,gloo_flat_s,
# hierarchical_mb_per_host,flat_mb_per_host,gloo_flat_mb_per_host,flat_over_hierarchical,
# gloo_flat_over_hierarchical; one row per gradient set.
set terminal pngcairo size 1400,560 font ",10" noenhanced
set output png
set datafile separator ","
set datafile columnheaders
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set key top left
set yrange [0:*]
set multiplot layout 1,2 title "allreduce of gradient sets across 2 hosts x 2 ranks, tbf-limited links (median of alternating trials)"
set title "seconds per step"
set ylabel "s"
plot csv using 6:xtic(1) title "kolo hierarchical", '' using 7 title "kolo flat", \
     '' using 8 title "one raw flat gloo allreduce"
set title "MB each host sent per step"
set ylabel "MB"
plot csv using 9:xtic(1) title "kolo hierarchical", '' using 10 title "kolo flat", \
     '' using 11 title "one raw flat gloo allreduce"
unset multiplot
