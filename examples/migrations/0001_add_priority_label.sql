-- A label for each item's priority (the new app version shows it).
-- storectl: changes Item.ZPRIORITYLABEL
ALTER TABLE ZITEM ADD COLUMN ZPRIORITYLABEL VARCHAR;
UPDATE ZITEM SET ZPRIORITYLABEL = CASE ZPRIORITY WHEN 0 THEN 'low' WHEN 1 THEN 'normal' ELSE 'high' END;
